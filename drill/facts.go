package drill

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/boxoffice"
)

// facts are what the database and the provider say after a scenario.
type facts struct {
	orders, invoices, emails, effectsDone int64
	providerUnique, providerCalls         int64 // for this system's e-mail keys
	payments, paid, parked                int64
	lostInvoices, lostEmails              int64 // orders without their invoice / provider e-mail
	strayInvoices, strayEmails            int64 // effects without an order (must be 0)
	projectionOff                         int64 // events whose search projection disagrees with the inventory
	stats                                 boxoffice.Stats
}

func (f facts) lost() int64 { return f.lostInvoices + f.lostEmails }

// converged reports whether every order has its invoice, its e-mail sent
// once at the provider and its seats in the search projection.
func (f facts) converged() bool {
	return f.invoices == f.orders && f.emails == f.orders && f.effectsDone == f.orders &&
		f.providerUnique == f.orders && f.lost() == 0 && f.projectionOff == 0
}

func (f facts) String() string {
	return fmt.Sprintf("orders=%d invoices=%d emails=%d provider_unique=%d", f.orders, f.invoices, f.emails, f.providerUnique)
}

// facts queries the database and the provider.
func (e *env) facts(ctx context.Context) (facts, error) {
	var f facts
	q := e.sys.DB().Pool()
	one := func(dst *int64, sql string, args ...any) error {
		if err := q.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
			return fmt.Errorf("drill: %s: %w", sql, err)
		}
		return nil
	}
	effects := e.sys.DB().Table("effects")
	for _, c := range []struct {
		dst  *int64
		sql  string
		args []any
	}{
		{&f.orders, `SELECT count(*) FROM orders`, nil},
		{&f.invoices, `SELECT count(*) FROM invoices`, nil},
		{&f.emails, `SELECT count(*) FROM outgoing_emails`, nil},
		{&f.effectsDone, `SELECT count(*) FROM ` + effects + ` WHERE kind = $1 AND state = 'completed'`, []any{boxoffice.EffectKindEmail}},
		{&f.payments, `SELECT count(*) FROM payments`, nil},
		{&f.paid, `SELECT count(*) FROM orders WHERE status = 'paid'`, nil},
		{&f.parked, `SELECT count(*) FROM ` + e.sys.DB().Table("dead_letters") + ` WHERE state = 'parked'`, nil},
		{&f.lostInvoices, `SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE i.order_id = o.order_id)`, nil},
		{&f.strayInvoices, `SELECT count(*) FROM invoices i WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_id = i.order_id)`, nil},
		{&f.projectionOff, `SELECT count(*) FROM event_inventory v LEFT JOIN event_availability a ON a.event_id = v.event_id
			WHERE a.event_id IS NULL OR a.version <> v.version OR a.seats_left <> v.capacity - v.sold`, nil},
	} {
		if err := one(c.dst, c.sql, c.args...); err != nil {
			return f, err
		}
	}
	// Provider side: every order's confirmation key performed exactly once.
	rows, err := q.Query(ctx, `SELECT order_id FROM orders`)
	if err != nil {
		return f, err
	}
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return f, err
		}
		ids[boxoffice.ConfirmationEmailKey(id)] = true
	}
	rows.Close()
	if p := e.sys.Provider(); p != nil {
		effs := p.Effects()
		for key, ef := range effs {
			if ids[key] {
				f.providerUnique++
				f.providerCalls += int64(ef.Calls)
			} else {
				f.strayEmails++
			}
		}
		for key := range ids {
			if _, ok := effs[key]; !ok {
				f.lostEmails++
			}
		}
	}
	st, err := e.sys.Stats(ctx)
	if err != nil {
		return f, err
	}
	f.stats = st
	return f, nil
}

// settle waits until cond holds on the facts (or the scenario timeout) and
// returns the last facts.
func (e *env) settle(ctx context.Context, cond func(facts) bool) (facts, error) {
	deadline := time.Now().Add(e.r.cfg.Timeout)
	for {
		f, err := e.facts(ctx)
		if err != nil {
			return f, err
		}
		if cond(f) {
			return f, nil
		}
		if time.Now().After(deadline) {
			return f, fmt.Errorf("drill: not settled after %v: %s lost=%d projection_off=%d parked=%d", e.r.cfg.Timeout, f, f.lost(), f.projectionOff, f.parked)
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dups sums the duplicates the system's components suppressed.
func dups(st boxoffice.Stats) int64 {
	var n int64
	for _, v := range st.DuplicatesSuppressed {
		n += v
	}
	return n
}
