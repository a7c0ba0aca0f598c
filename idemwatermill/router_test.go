package idemwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/idemkit/idem/internal/operator"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/idemwatermill"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// backend is one store the router tests run on, with the business write a
// handler makes on the store's own transaction type.
type backend[TTx any] struct {
	d     store.Driver[TTx]
	write func(ctx context.Context, tx TTx, msgUUID, handler string) error
}

const writesDDL = `CREATE TABLE writes (msg_uuid text NOT NULL, handler text NOT NULL)`

const insertWrite = `INSERT INTO writes (msg_uuid, handler) VALUES ($1, $2)`

func sqlWrite(ctx context.Context, tx *sql.Tx, msgUUID, handler string) error {
	_, err := tx.ExecContext(ctx, insertWrite, msgUUID, handler)
	return err
}

func pgxWrite(ctx context.Context, tx pgx.Tx, msgUUID, handler string) error {
	_, err := tx.Exec(ctx, insertWrite, msgUUID, handler)
	return err
}

// eachBackend runs body on SQLite, and on PostgreSQL through pgx and
// through database/sql when IDEM_TEST_POSTGRES_URL is set (those subtests
// skip with a message when it is not).
func eachBackend(t *testing.T, sqlBody func(t *testing.T, b backend[*sql.Tx]), pgxBody func(t *testing.T, b backend[pgx.Tx])) {
	t.Run("sqlite", func(t *testing.T) {
		sqlBody(t, backend[*sql.Tx]{d: testdb.SQLite(t), write: sqlWrite})
	})
	t.Run("pgx", func(t *testing.T) {
		pgxBody(t, backend[pgx.Tx]{d: testdb.Pgx(t), write: pgxWrite})
	})
	t.Run("sql-postgres", func(t *testing.T) {
		sqlBody(t, backend[*sql.Tx]{d: testdb.SQLPostgres(t), write: sqlWrite})
	})
}

// runs counts handler runs per (handler, message UUID).
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) inc(handler, id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[handler+"/"+id]++
	return r.n[handler+"/"+id]
}

func (r *runs) get(handler, id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[handler+"/"+id]
}

// startRouter runs router until the test ends.
func startRouter(t *testing.T, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
}

// blockingPubSub is a gochannel whose Publish returns only once every
// subscriber acknowledged the message (after as many nacks and
// redeliveries as it takes), so a test knows a delivery is settled
// without waiting for time to pass.
func blockingPubSub(t *testing.T) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newRouter(t *testing.T) *message.Router {
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	return router
}

func count[TTx any](t *testing.T, d store.Driver[TTx], q string, args ...any) int {
	t.Helper()
	return testdb.Count(t, d, q, args...)
}

// plainMiddleware creates the writes table and returns the middleware with
// its defaults on d.
func plainMiddleware[TTx any](t *testing.T, d store.Driver[TTx]) message.HandlerMiddleware {
	t.Helper()
	testdb.Exec(t, d, writesDDL)
	ib, err := inbox.New(d, inbox.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	once, err := idemwatermill.Middleware(ib, idemwatermill.Config[TTx]{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return once
}

// TestRouterRedeliveryRunsWritesOnce publishes one message (same UUID)
// twice through Watermill's Router: the first run fails after its writes
// (the Router nacks, gochannel redelivers), the second commits, and the
// redelivery after that is acknowledged without running the handler. The
// handler's writes exist once, for each of two consumers of the topic.
func TestRouterRedeliveryRunsWritesOnce(t *testing.T) {
	eachBackend(t, testRedelivery[*sql.Tx], testRedelivery[pgx.Tx])
}

func testRedelivery[TTx any](t *testing.T, b backend[TTx]) {
	ctx := context.Background()
	once := plainMiddleware(t, b.d)
	ps := blockingPubSub(t)
	router := newRouter(t)
	var r runs
	for _, name := range []string{"billing", "audit"} {
		h := router.AddNoPublisherHandler(name, "orders", ps, func(msg *message.Message) error {
			tx, ok := idemwatermill.TxFromContext[TTx](msg.Context())
			if !ok {
				return errors.New("no transaction in the message's context")
			}
			if err := b.write(msg.Context(), tx, msg.UUID, name); err != nil {
				return err
			}
			if r.inc(name, msg.UUID) == 1 && name == "billing" {
				return errors.New("crash after the writes")
			}
			return nil
		})
		h.AddMiddleware(once)
	}
	startRouter(t, router)

	payload := []byte(`{"order":"o-1"}`)
	if err := ps.Publish("orders", message.NewMessage("evt-1", payload)); err != nil {
		t.Fatal(err)
	}
	if got := r.get("billing", "evt-1"); got != 2 {
		t.Fatalf("billing ran %d times for the first delivery and its redelivery, want 2 (fail, then commit)", got)
	}
	// The same UUID again: a broker redelivery, or a producer's retry.
	if err := ps.Publish("orders", message.NewMessage("evt-1", payload)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"billing", "audit"} {
		want := map[string]int{"billing": 2, "audit": 1}[name]
		if got := r.get(name, "evt-1"); got != want {
			t.Errorf("%s ran %d times, want %d: the duplicate must not run it", name, got, want)
		}
		if n := count(t, b.d, `SELECT count(*) FROM writes WHERE msg_uuid = $1 AND handler = $2`, "evt-1", name); n != 1 {
			t.Errorf("%s: %d writes for evt-1, want 1", name, n)
		}
		rec, found, err := operator.InboxRecordOf(ctx, b.d, name, "evt-1")
		if err != nil || !found || rec.State != "completed" {
			t.Errorf("%s: inbox record of evt-1: state %q found %v err %v, want completed", name, rec.State, found, err)
		}
	}
}

// TestRouterEventsCommitWithTheHandler has a handler publish one event
// through the Publisher (the transaction taken from the message's context)
// and return another (written by the middleware through Config.Outbox),
// fail once after that and succeed on the redelivery: the outbox holds the
// two events once. A relay then publishes them through a RelayPublisher to
// a gochannel, where they arrive with their UUIDs and metadata.
func TestRouterEventsCommitWithTheHandler(t *testing.T) {
	eachBackend(t, testEvents[*sql.Tx], testEvents[pgx.Tx])
}

func testEvents[TTx any](t *testing.T, b backend[TTx]) {
	ctx := context.Background()
	testdb.Exec(t, b.d, writesDDL)
	ib, err := inbox.New(b.d, inbox.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(b.d, outbox.Config{Source: "/billing", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	events, err := idemwatermill.NewPublisher(b.d, ob, idemwatermill.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	once, err := idemwatermill.Middleware(ib, idemwatermill.Config[TTx]{Outbox: events, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ps := blockingPubSub(t)
	router := newRouter(t)
	var r runs
	h := router.AddHandler("billing", "orders", ps, "invoices", events, func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := idemwatermill.TxFromContext[TTx](msg.Context())
		if !ok {
			return nil, errors.New("no transaction in the message's context")
		}
		if err := b.write(msg.Context(), tx, msg.UUID, "billing"); err != nil {
			return nil, err
		}
		audit := message.NewMessage("audit-"+msg.UUID, msg.Payload)
		audit.SetContext(msg.Context()) // the handler's transaction
		if err := events.Publish("audit", audit); err != nil {
			return nil, err
		}
		if r.inc("billing", msg.UUID) == 1 {
			return nil, errors.New("crash after the writes and the publish")
		}
		inv := message.NewMessage("invoice-"+msg.UUID, []byte(`{"invoice":"i-1"}`))
		inv.Metadata.Set(idemwatermill.MetadataKey, "o-1")
		inv.Metadata.Set("tenant", "acme")
		return []*message.Message{inv}, nil
	})
	h.AddMiddleware(once)
	startRouter(t, router)

	if err := ps.Publish("orders", message.NewMessage("evt-1", []byte(`{"order":"o-1"}`))); err != nil {
		t.Fatal(err)
	}
	if got := r.get("billing", "evt-1"); got != 2 {
		t.Fatalf("billing ran %d times, want 2 (fail, then commit)", got)
	}
	if n := count(t, b.d, `SELECT count(*) FROM writes WHERE msg_uuid = $1`, "evt-1"); n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
	counts, err := operator.OutboxCounts(ctx, b.d)
	if err != nil {
		t.Fatal(err)
	}
	if counts["pending"] != 2 || len(counts) != 1 {
		t.Fatalf("outbox counts %v, want 2 pending (the failed run's events rolled back)", counts)
	}
	for _, id := range []string{"audit-evt-1", "invoice-evt-1"} {
		if _, found, err := operator.OutboxStateOf(ctx, b.d, "/billing", id); err != nil || !found {
			t.Errorf("event %s: found %v err %v", id, found, err)
		}
	}

	// The relay publishes the events through any Watermill publisher.
	broker := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10}, watermill.NopLogger{})
	t.Cleanup(func() { _ = broker.Close() })
	invoices, err := broker.Subscribe(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(b.d, idemwatermill.NewRelayPublisher(broker, idemwatermill.RelayPublisherConfig{}),
		outbox.RelayConfig{PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	defer func() {
		stop()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	select {
	case got := <-invoices:
		got.Ack()
		if got.UUID != "invoice-evt-1" || string(got.Payload) != `{"invoice":"i-1"}` {
			t.Errorf("relayed %s %s, want invoice-evt-1", got.UUID, got.Payload)
		}
		for k, want := range map[string]string{
			"tenant": "acme", idemwatermill.MetadataKey: "o-1",
			outbox.HeaderID: "invoice-evt-1", outbox.HeaderSource: "/billing", outbox.HeaderType: "invoices",
		} {
			if v := got.Metadata.Get(k); v != want {
				t.Errorf("metadata %s = %q, want %q", k, v, want)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay published nothing in 30s")
	}
}

// TestDeadLetters checks Config.DeadLetters: a permanent error is parked at
// once, a transient one after MaxAttempts tries, a reused UUID with another
// payload and a handler returning messages without Config.Outbox are parked
// as permanent; each delivery is acknowledged, and no inbox record is
// left for any of them.
func TestDeadLetters(t *testing.T) {
	eachBackend(t, testDeadLetters[*sql.Tx], testDeadLetters[pgx.Tx])
}

func newDeadLetters[TTx any](t *testing.T, d store.Driver[TTx], maxAttempts int) (message.HandlerMiddleware, *dlq.Store[TTx]) {
	t.Helper()
	ib, err := inbox.New(d, inbox.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	dls, err := dlq.New(d, dlq.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	once, err := idemwatermill.Middleware(ib, idemwatermill.Config[TTx]{
		DeadLetters: dls, MaxAttempts: maxAttempts, Backoff: idem.Backoff{Base: time.Millisecond, Max: time.Millisecond}, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return once, dls
}

func testDeadLetters[TTx any](t *testing.T, b backend[TTx]) {
	ctx := context.Background()
	once, dls := newDeadLetters(t, b.d, 3)
	ps := blockingPubSub(t)
	router := newRouter(t)
	var r runs
	h := router.AddHandler("billing", "orders", ps, "invoices", ps, func(msg *message.Message) ([]*message.Message, error) {
		r.inc("billing", msg.UUID)
		switch string(msg.Payload) {
		case "permanent":
			return nil, idem.Permanent(errors.New("invalid order"))
		case "transient":
			return nil, errors.New("database busy")
		case "output":
			return []*message.Message{message.NewMessage("out", nil)}, nil
		}
		return nil, nil
	})
	h.AddMiddleware(once)
	startRouter(t, router)

	publish := func(id, payload string) {
		t.Helper()
		if err := ps.Publish("orders", message.NewMessage(id, []byte(payload))); err != nil {
			t.Fatal(err)
		}
	}
	publish("p-1", "permanent")
	publish("t-1", "transient")
	publish("o-1", "output")
	publish("ok-1", "fine")
	publish("ok-1", "another payload") // the same UUID reused: a fingerprint mismatch

	want := map[string]struct {
		runs, attempts int
		class          string
	}{
		"p-1":  {1, 1, "permanent"},
		"t-1":  {3, 3, "transient"},
		"o-1":  {1, 1, "permanent"},
		"ok-1": {1, 1, "fingerprint_mismatch"},
	}
	letters, err := dls.List(ctx, dlq.Filter{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != len(want) {
		t.Fatalf("%d letters, want %d: %v", len(letters), len(want), letters)
	}
	for _, l := range letters {
		w, ok := want[l.MessageID]
		if !ok {
			t.Errorf("unexpected letter %v", l)
			continue
		}
		if got := r.get("billing", l.MessageID); got != w.runs {
			t.Errorf("%s: handler ran %d times, want %d", l.MessageID, got, w.runs)
		}
		if l.Attempts != w.attempts || l.ErrorClass != w.class || l.Source != "orders" {
			t.Errorf("%s: letter attempts %d class %q source %q, want %d %q orders", l.MessageID, l.Attempts, l.ErrorClass, l.Source, w.attempts, w.class)
		}
		if l.MessageID == "o-1" && !strings.Contains(l.Error, idemwatermill.ErrOutputWithoutOutbox.Error()) {
			t.Errorf("o-1: letter error %q, want ErrOutputWithoutOutbox", l.Error)
		}
		if l.MessageID != "ok-1" {
			if _, found, _ := operator.InboxRecordOf(ctx, b.d, "billing", l.MessageID); found {
				t.Errorf("%s: an inbox record was left for a dead-lettered message", l.MessageID)
			}
		}
	}
}

// TestRedrive dead-letters a message for one of the two consumers of its
// topic, then redrives the letter through a RelayPublisher: the letter's
// consumer processes it (its write once), the other consumer, which
// processed the original, acknowledges the redrive without running.
func TestRedrive(t *testing.T) {
	eachBackend(t, testRedrive[*sql.Tx], testRedrive[pgx.Tx])
}

func testRedrive[TTx any](t *testing.T, b backend[TTx]) {
	ctx := context.Background()
	testdb.Exec(t, b.d, writesDDL)
	once, dls := newDeadLetters(t, b.d, 1)
	// Not the blocking gochannel: Redrive commits its claim on the letter
	// after the publish returns, and on SQLite that claim holds the one
	// write lock the handlers need to settle the redriven message.
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	settled := make(chan string, 10) // handler names, once a delivery is settled
	router := newRouter(t)
	var r runs
	var mu sync.Mutex
	broken := true
	for _, name := range []string{"billing", "audit"} {
		h := router.AddNoPublisherHandler(name, "orders", ps, func(msg *message.Message) error {
			tx, _ := idemwatermill.TxFromContext[TTx](msg.Context())
			if err := b.write(msg.Context(), tx, msg.UUID, name); err != nil {
				return err
			}
			r.inc(name, msg.UUID)
			mu.Lock()
			defer mu.Unlock()
			if name == "billing" && broken {
				return idem.Permanent(errors.New("unknown customer"))
			}
			return nil
		})
		h.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc { // outside once
			return func(msg *message.Message) ([]*message.Message, error) {
				out, err := h(msg)
				if err == nil {
					settled <- name
				}
				return out, err
			}
		}, once)
	}
	startRouter(t, router)
	awaitSettled := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-settled:
			case <-time.After(30 * time.Second):
				t.Fatal("a delivery was not settled in 30s")
			}
		}
	}

	if err := ps.Publish("orders", message.NewMessage("evt-1", []byte(`{"order":"o-1"}`))); err != nil {
		t.Fatal(err)
	}
	awaitSettled(2)
	letters, err := dls.List(ctx, dlq.Filter{Consumer: "billing"})
	if err != nil || len(letters) != 1 {
		t.Fatalf("billing letters %v (%v), want 1", letters, err)
	}
	mu.Lock()
	broken = false // the operator fixed the customer
	mu.Unlock()
	if _, err := dls.Redrive(ctx, letters[0].ID, "operator", idemwatermill.NewRelayPublisher(ps, idemwatermill.RelayPublisherConfig{})); err != nil {
		t.Fatal(err)
	}
	awaitSettled(2)
	for name, want := range map[string]int{"billing": 2, "audit": 1} {
		if got := r.get(name, "evt-1"); got != want {
			t.Errorf("%s ran %d times, want %d", name, got, want)
		}
		if n := count(t, b.d, `SELECT count(*) FROM writes WHERE msg_uuid = $1 AND handler = $2`, "evt-1", name); n != 1 {
			t.Errorf("%s: %d writes, want 1", name, n)
		}
		if rec, found, err := operator.InboxRecordOf(ctx, b.d, name, "evt-1"); err != nil || !found || rec.State != "completed" {
			t.Errorf("%s: inbox record %q %v %v, want completed", name, rec.State, found, err)
		}
	}
	if l, err := dls.Get(ctx, letters[0].ID); err != nil || l.State != dlq.Redriven {
		t.Errorf("letter after the redrive: %v %v, want redriven", l.State, err)
	}
}

// TestRouterTwoInstances runs two routers with the same handler name on
// one topic, as two instances of a service: both receive the message at
// once, and the inbox lets one of them run the handler.
func TestRouterTwoInstances(t *testing.T) {
	eachBackend(t, testTwoInstances[*sql.Tx], testTwoInstances[pgx.Tx])
}

func testTwoInstances[TTx any](t *testing.T, b backend[TTx]) {
	once := plainMiddleware(t, b.d)
	ps := blockingPubSub(t)
	var r runs
	for range 2 {
		router := newRouter(t)
		h := router.AddNoPublisherHandler("billing", "orders", ps, func(msg *message.Message) error {
			tx, _ := idemwatermill.TxFromContext[TTx](msg.Context())
			r.inc("billing", msg.UUID)
			return b.write(msg.Context(), tx, msg.UUID, "billing")
		})
		h.AddMiddleware(once)
		startRouter(t, router)
	}
	for i := range 20 {
		id := "evt-" + strconv.Itoa(i)
		if err := ps.Publish("orders", message.NewMessage(id, []byte(id))); err != nil {
			t.Fatal(err)
		}
		if got := r.get("billing", id); got != 1 {
			t.Errorf("%s: the handler ran %d times across the two instances, want 1", id, got)
		}
	}
	if n := count(t, b.d, `SELECT count(*) FROM writes`); n != 20 {
		t.Errorf("%d writes for 20 messages, want 20", n)
	}
}
