package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
			err := fmt.Errorf("drill: not settled after %v: %s lost=%d projection_off=%d parked=%d", e.r.cfg.Timeout, f, f.lost(), f.projectionOff, f.parked)
			if f.projectionOff > 0 {
				err = fmt.Errorf("%w\n%s", err, e.projectionReport(ctx))
			}
			return f, err
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

// projectionReport explains an off search projection: per event whose
// availability disagrees with the inventory, both rows, and the events of
// newer versions than the projection's with where each one is (outbox
// state, search inbox record, dead letter).
func (e *env) projectionReport(ctx context.Context) string {
	q := e.sys.DB().Pool()
	type row struct {
		event                 string
		invVersion, invLeft   int64
		projVersion, projLeft int64
		hasProjection         bool
	}
	rows, err := q.Query(ctx, `SELECT v.event_id, v.version, v.capacity - v.sold, coalesce(a.version, -1), coalesce(a.seats_left, -1)
		FROM event_inventory v LEFT JOIN event_availability a ON a.event_id = v.event_id
		WHERE a.event_id IS NULL OR a.version <> v.version OR a.seats_left <> v.capacity - v.sold ORDER BY v.event_id`)
	if err != nil {
		return "projection report: " + err.Error()
	}
	var off []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.event, &r.invVersion, &r.invLeft, &r.projVersion, &r.projLeft); err != nil {
			rows.Close()
			return "projection report: " + err.Error()
		}
		r.hasProjection = r.projVersion >= 0
		off = append(off, r)
	}
	rows.Close()
	// Every OrderConfirmed in the outbox, with its search inbox record and
	// dead letter, if any.
	type ev struct {
		id, state, inbox, letter string
		version                  int64
	}
	byEvent := map[string][]ev{}
	orows, err := q.Query(ctx, `SELECT o.event_id, o.state, o.payload, coalesce(i.state, ''), coalesce(d.state, '')
		FROM `+e.sys.DB().Table("outbox")+` o
		LEFT JOIN `+e.sys.DB().Table("inbox")+` i ON i.consumer = $1 AND i.message_id = o.event_id
		LEFT JOIN `+e.sys.DB().Table("dead_letters")+` d ON d.consumer = $1 AND d.message_id = o.event_id`, boxoffice.ConsumerSearch)
	if err != nil {
		return "projection report: " + err.Error()
	}
	for orows.Next() {
		var x ev
		var payload []byte
		if err := orows.Scan(&x.id, &x.state, &payload, &x.inbox, &x.letter); err != nil {
			orows.Close()
			return "projection report: " + err.Error()
		}
		var oc boxoffice.OrderConfirmed
		if json.Unmarshal(payload, &oc) != nil {
			continue
		}
		x.version = oc.EventVersion
		byEvent[oc.EventID] = append(byEvent[oc.EventID], x)
	}
	orows.Close()
	var b strings.Builder
	b.WriteString("search projection off:")
	for _, r := range off {
		fmt.Fprintf(&b, "\n  %s: inventory version=%d seats_left=%d; projection ", r.event, r.invVersion, r.invLeft)
		if r.hasProjection {
			fmt.Fprintf(&b, "version=%d seats_left=%d", r.projVersion, r.projLeft)
		} else {
			b.WriteString("missing")
		}
		evs := byEvent[r.event]
		slices.SortFunc(evs, func(a, b ev) int { return int(a.version - b.version) })
		var newer []ev
		for _, x := range evs {
			if x.version > r.projVersion {
				newer = append(newer, x)
			}
		}
		fmt.Fprintf(&b, "; %d events in the outbox, %d newer than the projection", len(evs), len(newer))
		for i, x := range newer {
			if i == 5 {
				fmt.Fprintf(&b, "\n    … %d more", len(newer)-i)
				break
			}
			fmt.Fprintf(&b, "\n    message %s version=%d outbox=%s search_inbox=%s dead_letter=%s", x.id, x.version, x.state, or(x.inbox, "none"), or(x.letter, "none"))
		}
	}
	return b.String()
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
