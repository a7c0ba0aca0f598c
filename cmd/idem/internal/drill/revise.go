package drill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
)

// The drill's own consumers of revise-one-consumer, each appending one row
// per message it applies (no business key: the inbox alone dedups). The
// operator revises the first one's letter, redrives the second one's, and
// the producer's re-send reaches the third.
const (
	revisedConsumer  = "ledger-revised"
	redrivenConsumer = "ledger-redriven"
	resentConsumer   = "ledger-resent"
)

var reviseConsumers = []string{revisedConsumer, redrivenConsumer, resentConsumer}

// reviseOneConsumer is the revise-one-consumer scenario (issue 30): one
// order's event is poisoned for three consumers of its subject, so each
// parks a letter for it. The fix ships; the operator edits the first
// consumer's letter and redrives it as a revision (a new message id),
// redrives the second consumer's letter as is, and the producer then sends
// the original again. Each consumer must apply the order exactly once: the
// first its revision (the original is recorded in its inbox with the
// revision, so the re-send is a duplicate there), the second the redriven
// original, the third the re-send; no consumer applies a revision or a
// redrive made for another (broker.HeaderRedriveFor). The box office's own
// consumers, which processed the original, apply nothing twice either.
func reviseOneConsumer(ctx context.Context, r *runner, res *Result) error {
	e, err := r.newEnv(ctx, "revise-one-consumer", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	db := e.sys.DB()
	table := db.Table("drill_applied")
	if _, err := db.Pool().Exec(ctx, `CREATE TABLE `+table+` (consumer text NOT NULL, message_id text NOT NULL, payload text NOT NULL)`); err != nil {
		return err
	}
	var poisoned atomic.Bool
	poisoned.Store(true)
	dups := dupCounters{}
	for _, name := range reviseConsumers {
		dups[name] = &dupCounter{}
		stop, err := runApplier(ctx, e, name, table, &poisoned, dups[name])
		if err != nil {
			return err
		}
		defer stop()
	}
	s := r.sendOrders(ctx, e, 1, "revise", events5, public, 0, 31)
	if err := s.err(); err != nil {
		return err
	}
	if _, err := e.settle(ctx, func(f facts) bool { return f.converged() && f.parked == int64(len(reviseConsumers)) }); err != nil {
		return err
	}
	letters := map[string]dlq.Letter{}
	for _, name := range reviseConsumers {
		ls, err := e.sys.DeadLetters().List(ctx, dlq.Filter{Consumer: name, State: dlq.Parked})
		if err != nil {
			return err
		}
		if len(ls) != 1 {
			return fmt.Errorf("drill: %d letters parked by %s, want 1", len(ls), name)
		}
		letters[name] = ls[0]
	}
	original := letters[resentConsumer].Message()

	// The fix ships. The operator revises one letter and redrives another.
	poisoned.Store(false)
	edited, err := editPayload(original.Payload)
	if err != nil {
		return err
	}
	pub, err := e.sys.Config().Broker.Publisher()
	if err != nil {
		return err
	}
	defer pub.Close()
	_, rev, err := e.sys.DeadLetters().Revise(ctx, letters[revisedConsumer].ID, "drill", edited, pub)
	if err != nil {
		return err
	}
	if _, err := e.sys.DeadLetters().Redrive(ctx, letters[redrivenConsumer].ID, "drill", pub); err != nil {
		return err
	}
	count := func() (map[string]int64, error) { return appliedBy(ctx, e, table) }
	if _, err := waitApplied(ctx, r, count, func(n map[string]int64) bool {
		return n[revisedConsumer] >= 1 && n[redrivenConsumer] >= 1
	}); err != nil {
		return err
	}
	// The producer sends the original again, after the broker's duplicate
	// window (JetStream would drop it inside it).
	if r.brokerDedups() {
		time.Sleep(duplicateWindow + 200*time.Millisecond)
	}
	if err := pub.Publish(ctx, original); err != nil {
		return err
	}
	if _, err := waitApplied(ctx, r, count, func(n map[string]int64) bool {
		return n[resentConsumer] >= 1 && dups[revisedConsumer].n.Load() >= 1 && dups[redrivenConsumer].n.Load() >= 1
	}); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // a second application would show by now
	n, err := count()
	if err != nil {
		return err
	}
	ofRevision, err := appliedRows(ctx, e, table, revisedConsumer, rev.ID)
	if err != nil {
		return err
	}
	f, err := e.facts(ctx)
	if err != nil {
		return err
	}
	res.DuplicatesSuppressed = dups.total()
	res.Expected = fmt.Sprintf("applied %s=1(revision) %s=1 %s=1 resend_dups=2 parked=1 orders=invoices=emails=1",
		revisedConsumer, redrivenConsumer, resentConsumer)
	res.Observed = fmt.Sprintf("applied %s=%d(revision:%d) %s=%d %s=%d resend_dups=%d parked=%d %s",
		revisedConsumer, n[revisedConsumer], ofRevision, redrivenConsumer, n[redrivenConsumer], resentConsumer, n[resentConsumer],
		dups[revisedConsumer].n.Load()+dups[redrivenConsumer].n.Load(), f.parked, f)
	res.Lost = f.lost()
	res.Pass = n[revisedConsumer] == 1 && ofRevision == 1 && n[redrivenConsumer] == 1 && n[resentConsumer] == 1 &&
		f.parked == 1 && f.orders == 1 && f.converged()
	return nil
}

// editPayload is the operator's edit of the poisoned event: another
// customer e-mail address.
func editPayload(payload []byte) ([]byte, error) {
	var ev map[string]any
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("drill: the order's event: %w", err)
	}
	ev["customer_email"] = "revised@example.com"
	return json.Marshal(ev)
}

// runApplier runs consumer name on the system's broker, database and
// dead-letter store until the returned stop is called: it appends a row
// (name, message id, payload) to table per message it applies, and rejects
// every message for good while poisoned holds.
func runApplier(ctx context.Context, e *env, name, table string, poisoned *atomic.Bool, o idem.Observer) (stop func(), err error) {
	db := e.sys.DB()
	return runConsumer(ctx, e, inbox.Config{}, consumer.Config[any]{Name: name, Observer: o,
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			if poisoned.Load() {
				return idem.Permanent(errors.New("drill: " + name + " rejects the order"))
			}
			_, err := db.Tx(tx).Exec(ctx, `INSERT INTO `+table+` (consumer, message_id, payload) VALUES ($1, $2, $3)`,
				name, msg.ID, string(msg.Payload))
			return err
		}})
}

// runConsumer runs a consumer of cfg (its DLQ the system's dead-letter
// store, FetchWait 100ms) with an inbox of ib on the system's broker and
// database, subscribed as cfg.Name, until the returned stop is called.
func runConsumer(ctx context.Context, e *env, ib inbox.Config, cfg consumer.Config[any]) (stop func(), err error) {
	db := e.sys.DB()
	ib.Logger = cmp.Or(ib.Logger, e.sys.Config().Logger)
	in, err := inbox.New(db, ib)
	if err != nil {
		return nil, err
	}
	sub, err := e.sys.Config().Broker.Subscriber(ctx, cfg.Name)
	if err != nil {
		return nil, err
	}
	cfg.DLQ, cfg.FetchWait = e.sys.DeadLetters(), 100*time.Millisecond
	cfg.Logger = cmp.Or(cfg.Logger, e.sys.Config().Logger)
	cons, err := consumer.New(in, sub, cfg)
	if err != nil {
		sub.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = cons.Run(rctx) })
	return func() { cancel(); wg.Wait(); sub.Close() }, nil
}

// appliedBy counts the rows of table per consumer.
func appliedBy(ctx context.Context, e *env, table string) (map[string]int64, error) {
	return operator.CountBy(ctx, e.sys.DB().Pool(), `SELECT consumer, count(*) FROM `+table+` GROUP BY consumer`)
}

// appliedRows counts the rows of table of consumer for message id whose
// payload is the operator's edit.
func appliedRows(ctx context.Context, e *env, table, consumer, id string) (int64, error) {
	var n int64
	err := e.sys.DB().Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE consumer = $1 AND message_id = $2 AND payload LIKE $3`,
		consumer, id, "%revised@example.com%").Scan(&n)
	return n, err
}

// waitApplied polls count until done holds or the scenario's timeout
// passes.
func waitApplied(ctx context.Context, r *runner, count func() (map[string]int64, error), done func(map[string]int64) bool) (map[string]int64, error) {
	deadline := time.Now().Add(r.cfg.Timeout)
	for {
		n, err := count()
		if err != nil || done(n) {
			return n, err
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("drill: not settled after %v: applied %v", r.cfg.Timeout, n)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dupCounter is an idem.Observer that counts the duplicates its
// consumer suppressed and records nothing else.
type dupCounter struct {
	obs.NopObserver
	n atomic.Int64
}

func (d *dupCounter) DuplicateContext(context.Context, string, string) { d.n.Add(1) }

// dupCounters are the counters of several consumers.
type dupCounters map[string]*dupCounter

func (ds dupCounters) total() int64 {
	var n int64
	for _, d := range ds {
		n += d.n.Load()
	}
	return n
}
