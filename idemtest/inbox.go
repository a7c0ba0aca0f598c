package idemtest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/store"
)

// Consumer is the user's message handler under test.
type Consumer struct {
	// Backend is the database (default: a fresh SQLite file).
	Backend Backend
	// Name is the consumer name the inbox records messages under.
	// Defaults to "idemtest".
	Name string
	// Setup creates the user's own tables; it runs once, after idem's
	// migrations. Optional.
	Setup func(ctx context.Context, db DB) error
	// Handler builds the handler as in production: it applies one
	// message on the inbox's transaction tx. Required.
	Handler func(env ConsumerEnv) inbox.Handler[*sql.Tx]
	// Invariant checks the database after every delivery. applied lists
	// the messages whose processing committed so far, each once, in the
	// order they committed; the handler must have applied each of them
	// exactly once, keyed by msg.ID. Required.
	Invariant func(ctx context.Context, db DB, applied []idem.Message) error
}

// ConsumerEnv is what Consumer.Handler wires the handler with.
type ConsumerEnv struct {
	// DB is the database; the handler's writes belong on tx, not on DB.
	DB DB
	// Store is idem's store on DB, with idemtest's faults, for the
	// user's own idem components (an effect.Ledger, an outbox.Writer…).
	Store store.Driver[*sql.Tx]
}

// Inbox proves that the user's consumer handler, run through the inbox
// (one transaction records the message and the handler's writes), applies
// each message once. Each scenario delivers the messages under fresh ids
// (so scenarios do not meet each other's records), payloads unchanged: in
// order; each twice (the second is a duplicate); the first delivery
// failing at COMMIT or crashing after the handler, then redelivered; in
// reverse order; Concurrency copies of one message at once (one is
// processed, every other ends as a duplicate: a copy that fails with a
// retryable error, such as a busy database, is redelivered as a broker
// would, up to three times, until it does; an error that persists or is
// permanent fails the check); and two messages with distinct ids and the
// same payload (both are processed: the envelope id is the identity, not
// the payload). The invariant runs after every delivery.
func Inbox(t testing.TB, c Consumer, msgs ...idem.Message) {
	t.Helper()
	if c.Handler == nil || c.Invariant == nil {
		t.Fatalf("idemtest.Inbox: Consumer.Handler and Consumer.Invariant are required")
		return
	}
	if len(msgs) == 0 {
		t.Fatalf("idemtest.Inbox: no messages")
		return
	}
	if c.Name == "" {
		c.Name = "idemtest"
	}
	d, err := c.Backend.open(t)
	if err != nil {
		t.Fatalf("idemtest.Inbox: open the store: %v", err)
		return
	}
	db := DB{DB: d.DB(), Dialect: d.Dialect()}
	if c.Setup != nil {
		if err := c.Setup(context.Background(), db); err != nil {
			t.Fatalf("idemtest.Inbox: Setup: %v", err)
			return
		}
	}
	in := &injector{}
	fd := newFaultDriver(d, in)
	ib, err := inbox.New[*sql.Tx](fd, inbox.Config{})
	if err != nil {
		t.Fatalf("idemtest.Inbox: %v", err)
		return
	}
	r := &inboxRun{t: t, c: c, db: db, in: in, ib: ib, h: c.Handler(ConsumerEnv{DB: db, Store: fd}), runs: map[string]int{}}
	for _, sc := range []func([]idem.Message) bool{r.inOrder, r.duplicates, r.redelivery(faultAtCommit),
		r.redelivery(faultAfterHandler), r.outOfOrder, r.concurrent, r.samePayload} {
		if !sc(msgs) {
			return // one story: later scenarios would retell it
		}
	}
}

// inboxRun is one Inbox run.
type inboxRun struct {
	t   testing.TB
	c   Consumer
	db  DB
	in  *injector
	ib  *inbox.Inbox[*sql.Tx]
	h   inbox.Handler[*sql.Tx]
	seq int

	mu      sync.Mutex
	runs    map[string]int // handler runs per message id
	applied []idem.Message // committed, in commit order
}

// Hints for the inbox scenarios.
const (
	hintInboxFirst = "the first delivery of each message already breaks the invariant: the handler must write on the " +
		"inbox's transaction tx and key its effect on msg.ID, the envelope id that every redelivery carries, " +
		"not on an id read from the payload"
	hintInboxOutside = "the handler has an effect outside the inbox's transaction tx (a write on another connection, an " +
		"e-mail, an in-memory counter, a call to another service): it survived a delivery that was rolled back (and " +
		"the redelivery does it again). Write it on tx (an outbox row), or call the service through the effect ledger"
	hintInboxPayloadID = "two messages with distinct ids and the same payload are two messages: the handler must key its " +
		"effect on msg.ID (the envelope), not on an id read from the payload"
	hintInboxDuplicate = "a duplicate delivery does not run the handler: an effect that happened again comes from code " +
		"that runs before the inbox records the message"
	hintInboxRacing = "a copy of a message delivered while another copy is processed must end as a duplicate once " +
		"that copy committed (inbox.Process waits for it, or fails with a retryable error that its redelivery resolves). " +
		"An error that persists or is permanent comes from the store under concurrent writers: check the Backend's " +
		"store (SQLite's busy timeout, PostgreSQL's lock and statement timeouts, an isolation level above READ COMMITTED, " +
		"whose serialization failures must stay retryable) and the error classification of a driver of your own"
)

// scenario starts the story of one scenario over fresh copies of msgs.
func (r *inboxRun) scenario(name string, msgs []idem.Message) (*story, []idem.Message) {
	r.seq++
	out := make([]idem.Message, len(msgs))
	for i, m := range msgs {
		m.ID = fmt.Sprintf("idemtest-%d-%s", r.seq, m.ID)
		m.Attempt = 1
		out[i] = m
	}
	s := &story{t: r.t, title: fmt.Sprintf("consumer %q, scenario %q", r.c.Name, name)}
	s.ran = func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		var b []string
		for _, m := range out {
			b = append(b, fmt.Sprintf("%s: %d", m.ID, r.runs[m.ID]))
		}
		return fmt.Sprintf("handler runs per message id: %v", b)
	}
	s.check = func(ctx context.Context) error {
		r.mu.Lock()
		applied := slices.Clone(r.applied)
		r.mu.Unlock()
		return r.c.Invariant(ctx, r.db, applied)
	}
	return s, out
}

// deliver processes one delivery of m, with fault f armed (noFault: none).
func (r *inboxRun) deliver(ctx context.Context, m idem.Message, f fault) (inbox.Result, error) {
	if f != noFault {
		r.in.arm(f)
	}
	res, err := r.ib.Process(ctx, r.c.Name, m, func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
		r.mu.Lock()
		r.runs[msg.ID]++
		r.mu.Unlock()
		if err := r.h(ctx, tx, msg); err != nil {
			return err
		}
		if r.in.take(faultAfterHandler) {
			return errInjected // the delivery fails after the handler's writes
		}
		return nil
	})
	if err == nil && res == inbox.Processed {
		r.mu.Lock()
		r.applied = append(r.applied, m)
		r.mu.Unlock()
	}
	return res, err
}

// expect delivers m and checks the result, then the invariant.
func (r *inboxRun) expect(s *story, label string, m idem.Message, want inbox.Result, hint string) bool {
	r.t.Helper()
	res, err := r.deliver(context.Background(), m, noFault)
	s.step("%s %s (attempt %d): %v", label, m.ID, m.Attempt, result(res, err))
	if err != nil || res != want {
		s.fail(fmt.Sprintf("%s %s got %v, want %v", label, m.ID, result(res, err), want), hintHandlerError)
		return false
	}
	return s.invariant(hint)
}

const hintHandlerError = "the handler must apply a message it has not seen and return nil; an error rolls the delivery " +
	"back and the broker redelivers it forever"

func result(res inbox.Result, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return res.String()
}

func (r *inboxRun) inOrder(msgs []idem.Message) bool {
	s, ms := r.scenario("in order", msgs)
	for _, m := range ms {
		if !r.expect(s, "delivery of", m, inbox.Processed, hintInboxFirst) {
			return false
		}
	}
	return true
}

func (r *inboxRun) duplicates(msgs []idem.Message) bool {
	s, ms := r.scenario("duplicates", msgs)
	for _, m := range ms {
		if !r.expect(s, "delivery of", m, inbox.Processed, hintInboxFirst) {
			return false
		}
		m.Attempt = 2
		if !r.expect(s, "redelivery of", m, inbox.Duplicate, hintInboxDuplicate) {
			return false
		}
	}
	return true
}

func (r *inboxRun) redelivery(f fault) func([]idem.Message) bool {
	return func(msgs []idem.Message) bool {
		what := "the commit failed (rolled back)"
		if f == faultAfterHandler {
			what = "the delivery failed after the handler's writes (rolled back)"
		}
		s, ms := r.scenario("redelivery after "+what, msgs)
		for _, m := range ms {
			res, err := r.deliver(context.Background(), m, f)
			fired := r.in.disarm()
			got := result(res, err)
			s.step("delivery of %s (attempt 1), %s: %s", m.ID, what, got)
			if !fired {
				s.fail("the fault was never reached: the handler returned an error", hintHandlerError)
				return false
			}
			if !s.invariant(hintInboxOutside) {
				return false
			}
			m.Attempt = 2
			if !r.expect(s, "redelivery of", m, inbox.Processed, hintInboxOutside) {
				return false
			}
			m.Attempt = 3
			if !r.expect(s, "redelivery of", m, inbox.Duplicate, hintInboxDuplicate) {
				return false
			}
		}
		return true
	}
}

func (r *inboxRun) outOfOrder(msgs []idem.Message) bool {
	s, ms := r.scenario("out of order", msgs)
	slices.Reverse(ms)
	for _, m := range ms {
		if !r.expect(s, "delivery of", m, inbox.Processed, hintInboxFirst) {
			return false
		}
	}
	return true
}

// racingRedeliveries is how many times the concurrent scenario redelivers
// one racing delivery that failed with a retryable error, as a broker
// would, before it reports that the delivery never ended as a duplicate.
const racingRedeliveries = 3

func (r *inboxRun) concurrent(msgs []idem.Message) bool {
	s, ms := r.scenario("concurrent deliveries", msgs[:1])
	m := ms[0]
	type got struct {
		res inbox.Result
		err error
	}
	gots := make([]got, Concurrency)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for n := range gots {
		wg.Go(func() {
			<-start
			mm := m
			mm.Attempt = n + 1
			res, err := r.deliver(context.Background(), mm, noFault)
			gots[n] = got{res, err}
		})
	}
	close(start)
	wg.Wait()
	for n, g := range gots {
		s.step("racing delivery %d of %s: %s", n+1, m.ID, result(g.res, g.err))
	}
	// A racing delivery that failed with a retryable error (a busy
	// database, a lock or serialization failure) is not acknowledged: the
	// broker redelivers it, and each redelivery must end as a duplicate.
	attempt := Concurrency
	for n := range gots {
		for k := 0; k < racingRedeliveries && idem.IsRetryable(gots[n].err); k++ {
			attempt++
			mm := m
			mm.Attempt = attempt
			res, err := r.deliver(context.Background(), mm, noFault)
			gots[n] = got{res, err}
			s.step("redelivery %d of racing delivery %d of %s (attempt %d): %s", k+1, n+1, m.ID, attempt, result(res, err))
		}
	}
	processed := 0
	for _, g := range gots {
		if g.err == nil && g.res == inbox.Processed {
			processed++
		}
	}
	if processed != 1 {
		s.fail(fmt.Sprintf("%d of %d racing deliveries were processed (their redeliveries included), want exactly 1", processed, Concurrency), hintHandlerError)
		return false
	}
	for n, g := range gots {
		switch {
		case g.err == nil:
			continue // the one processed, or a duplicate
		case idem.IsRetryable(g.err):
			s.fail(fmt.Sprintf("racing delivery %d of %s still failed after %d redeliveries (%v), want it to end as %v: "+
				"the message it carries was processed, yet it is redelivered until the broker dead-letters it",
				n+1, m.ID, racingRedeliveries, g.err, inbox.Duplicate), hintInboxRacing)
		default:
			s.fail(fmt.Sprintf("racing delivery %d of %s failed with an error that is not retried (%v), want %v: "+
				"a broker dead-letters it although the message it carries was processed",
				n+1, m.ID, g.err, inbox.Duplicate), hintInboxRacing)
		}
		return false
	}
	if !s.invariant(hintInboxOutside) {
		return false
	}
	m.Attempt = attempt + 1
	return r.expect(s, "redelivery of", m, inbox.Duplicate, hintInboxDuplicate)
}

func (r *inboxRun) samePayload(msgs []idem.Message) bool {
	s, ms := r.scenario("distinct ids, same payload", msgs[:1])
	twin := ms[0]
	twin.ID += "-twin"
	return r.expect(s, "delivery of", ms[0], inbox.Processed, hintInboxFirst) &&
		r.expect(s, "delivery of", twin, inbox.Processed, hintInboxPayloadID)
}
