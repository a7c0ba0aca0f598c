package drill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/operator"
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
	var err error
	q := e.sys.DB().Pool()
	one := func(dst *int64, sql string, args ...any) error {
		if err := q.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
			return fmt.Errorf("drill: %s: %w", sql, err)
		}
		return nil
	}
	// The business tables are the boxoffice's; idem's tables are read
	// through their owners (the effect ledger, the dead-letter store).
	for _, c := range []struct {
		dst  *int64
		sql  string
		args []any
	}{
		{&f.orders, `SELECT count(*) FROM orders`, nil},
		{&f.invoices, `SELECT count(*) FROM invoices`, nil},
		{&f.emails, `SELECT count(*) FROM outgoing_emails`, nil},
		{&f.payments, `SELECT count(*) FROM payments`, nil},
		{&f.paid, `SELECT count(*) FROM orders WHERE status = 'paid'`, nil},
		{&f.lostInvoices, `SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE i.order_id = o.order_id)`, nil},
		{&f.strayInvoices, `SELECT count(*) FROM invoices i WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_id = i.order_id)`, nil},
		{&f.projectionOff, `SELECT count(*) FROM event_inventory v LEFT JOIN event_availability a ON a.event_id = v.event_id
			WHERE a.event_id IS NULL OR a.version <> v.version OR a.seats_left <> v.capacity - v.sold`, nil},
	} {
		if err := one(c.dst, c.sql, c.args...); err != nil {
			return f, err
		}
	}
	if f.effectsDone, err = e.emailsDone(ctx); err != nil {
		return f, err
	}
	if f.parked, err = e.parked(ctx); err != nil {
		return f, err
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

// listAll is the limit of the drill's listings: every row (a drill's
// tables are small).
const listAll = 1 << 30

// effects lists the ledger's effects in states that match keep.
func (e *env) effects(ctx context.Context, keep func(effect.Effect) bool, states ...effect.State) ([]effect.Effect, error) {
	var out []effect.Effect
	for _, st := range states {
		effs, err := e.sys.Ledger().List(ctx, st, listAll)
		if err != nil {
			return nil, fmt.Errorf("drill: effects %s: %w", st, err)
		}
		for _, ef := range effs {
			if keep(ef) {
				out = append(out, ef)
			}
		}
	}
	return out, nil
}

// emailsDone counts the completed e-mail effects without listing them:
// the ledger's e-mail effects (operator.EffectCountsByKind, every state) less
// those still open or failed, listed by state (few once the system
// settles). The kind count comes first, so an effect scheduled meanwhile
// only lowers the result; in_progress is listed on both sides of pending,
// so a claim or a release between two listings is still seen, and failed
// last, after the claims that fail.
func (e *env) emailsDone(ctx context.Context) (int64, error) {
	byKind, err := operator.EffectCountsByKind(ctx, e.sys.DB())
	if err != nil {
		return 0, fmt.Errorf("drill: effects by kind: %w", err)
	}
	notDone, err := e.effects(ctx, func(ef effect.Effect) bool { return ef.Kind == boxoffice.EffectKindEmail },
		effect.InProgress, effect.Pending, effect.InProgress, effect.Failed)
	if err != nil {
		return 0, err
	}
	keys := map[string]bool{}
	for _, ef := range notDone {
		keys[ef.Key] = true
	}
	return byKind[boxoffice.EffectKindEmail] - int64(len(keys)), nil
}

// parked counts the parked dead letters (operator.DLQCountParked, per consumer).
func (e *env) parked(ctx context.Context) (int64, error) {
	by, err := operator.DLQCountParked(ctx, e.sys.DB())
	if err != nil {
		return 0, fmt.Errorf("drill: parked letters: %w", err)
	}
	var n int64
	for _, c := range by {
		n += c
	}
	return n, nil
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
// availability disagrees with the inventory, both rows, and its
// OrderConfirmed events of newer versions than the projection's with
// where each one is (its outbox state, the search consumer's inbox
// record, its dead letter: each from the table's owner), after how the
// outbox and the inboxes stand overall (their owners' counts).
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
	letters, err := e.sys.DeadLetters().List(ctx, dlq.Filter{Consumer: boxoffice.ConsumerSearch, Limit: -1})
	if err != nil {
		return "projection report: " + err.Error()
	}
	letterOf := map[string]string{}
	for _, l := range letters {
		letterOf[l.MessageID] = string(l.State)
	}
	outboxBy, oerr := operator.OutboxCounts(ctx, e.sys.DB())
	inboxBy, ierr := operator.InboxCounts(ctx, e.sys.DB())
	if err := errors.Join(oerr, ierr); err != nil {
		return "projection report: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "search projection off; outbox %d published, %d pending, %d parked; inbox records %d completed, %d in progress, %d failed:",
		outboxBy[lease.Completed], outboxBy[lease.Pending], outboxBy[lease.Failed],
		inboxBy[lease.Completed], inboxBy[lease.InProgress], inboxBy[lease.Failed])
	for _, r := range off {
		fmt.Fprintf(&b, "\n  %s: inventory version=%d seats_left=%d; projection ", r.event, r.invVersion, r.invLeft)
		if r.hasProjection {
			fmt.Fprintf(&b, "version=%d seats_left=%d", r.projVersion, r.projLeft)
		} else {
			b.WriteString("missing")
		}
		evs := e.events.of(r.event)
		var newer []event
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
			ostate, ofound, oerr := operator.OutboxStateOf(ctx, e.sys.DB(), x.source, x.id)
			irec, ifound, ierr := operator.InboxRecordOf(ctx, e.sys.DB(), boxoffice.ConsumerSearch, x.id)
			if err := errors.Join(oerr, ierr); err != nil {
				return b.String() + "\nprojection report: " + err.Error()
			}
			fmt.Fprintf(&b, "\n    message %s version=%d outbox=%s search_inbox=%s dead_letter=%s", x.id, x.version,
				outboxWord(ostate, ofound), or(irec.State, ifound), or(letterOf[x.id], letterOf[x.id] != ""))
		}
	}
	return b.String()
}

// outboxWord names an event's outbox state as the outbox's API and the
// report always have: published (stored "completed" since migration
// 0010), pending, parked (stored "failed"); none when it is not there.
func outboxWord(state string, found bool) string {
	switch {
	case !found:
		return "none"
	case state == lease.Completed:
		return "published"
	case state == lease.Failed:
		return "parked"
	}
	return state
}

// or returns s when found, else "none".
func or(s string, found bool) string {
	if !found {
		return "none"
	}
	return s
}
