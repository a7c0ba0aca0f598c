// Package outbox_test runs the outbox's relay against JetStream (the
// idemjetstream module): Nats-Msg-Id dedup after a crash, a broker outage,
// a subject no stream covers.
package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// embeddedJetStream starts an in-process JetStream server with a stream
// capturing "test.>" and returns it with a publisher and the stream.
func embeddedJetStream(t testing.TB) (*embedded.Server, *idemjetstream.Publisher, js.Stream) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, j, err := idemjetstream.Dial(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	stream, err := idemjetstream.EnsureStream(context.Background(), j, js.StreamConfig{Name: "TEST", Subjects: []string{"test.>"}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return srv, pub, stream
}

func streamMsgs(t testing.TB, s js.Stream) uint64 {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Drill 6 on JetStream: the relay crashes after the PubAck and before the
// mark; the takeover republishes with the same Nats-Msg-Id, the stream
// reports every copy as a duplicate and stores each event once.
func TestJetStreamCrashAfterAckDuplicate(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testJetStreamCrashAfterAck(t, e.D) }, testdb.NoSQLPostgres)
}

func testJetStreamCrashAfterAck[TTx any](t *testing.T, d store.Driver[TTx]) {
	_, pub, stream := embeddedJetStream(t)
	o, _ := outbox.New(d, outbox.Config{})
	var evs []outbox.Event
	for i := range 20 {
		evs = append(evs, ev(fmt.Sprintf("k%d", i%4), i/4))
	}
	enqueueTx(t, d, o, evs...)
	cfg := fastRelay("crashy")
	// The crash hook runs after a batch publish; on a loaded machine a
	// publish timeout would send the batch one by one instead (no hook:
	// r1 would never crash), so the timeout is generous.
	cfg.ClaimTTL = 2 * time.Second
	cfg.PublishTimeout = 900 * time.Millisecond
	// The "crash": the broker stores the batch but the relay never learns
	// it (the PubAck is lost with the process), so nothing is marked; the
	// relay stops there.
	ctx, crash := context.WithCancel(context.Background())
	r1, _ := outbox.NewRelay(d, crashAfterPublish{ResultPublisher: pub, crash: crash}, cfg)
	_ = r1.Run(ctx)
	mustEqual(t, "marked before the crash", countState(t, d, lease.Completed), 0)
	mustEqual(t, "stored after crash", streamMsgs(t, stream), 20)

	var dups atomic.Int64
	cfg.Name = "survivor"
	cfg.OnDuplicate = func(context.Context, outbox.Event) { dups.Add(1) }
	r2, _ := outbox.NewRelay(d, pub, cfg)
	startRelay(t, r2)
	waitFor(t, "20 published", func() bool { return countState(t, d, lease.Completed) == 20 })
	mustEqual(t, "duplicates reported to the relay", dups.Load(), 20)
	mustEqual(t, "duplicates reported by the publisher", pub.Duplicates(), 20)
	mustEqual(t, "stored once", streamMsgs(t, stream), 20)
}

// Broker down: the embedded server stops for a while; events wait, nothing
// is parked or lost, and the relay resumes on its own after the restart.
func TestJetStreamBrokerDown(t *testing.T) {
	d := testdb.Pgx(t)
	srv, pub, stream := embeddedJetStream(t)
	o, _ := outbox.New(d, outbox.Config{})
	cfg := fastRelay("r1")
	cfg.MaxAttempts = 2
	cfg.PublishTimeout = 300 * time.Millisecond
	r, _ := outbox.NewRelay(d, pub, cfg)
	startRelay(t, r)
	for i := range 20 {
		enqueueTx(t, d, o, ev(fmt.Sprintf("k%d", i%4), i/4))
	}
	waitFor(t, "first 20", func() bool { return countState(t, d, lease.Completed) == 20 })
	srv.Stop()
	for i := 20; i < 100; i++ {
		enqueueTx(t, d, o, ev(fmt.Sprintf("k%d", i%4), i/4))
	}
	time.Sleep(time.Second) // the relay keeps failing meanwhile
	mustEqual(t, "parked during outage", countState(t, d, lease.Failed), 0)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "100 published", func() bool { return countState(t, d, lease.Completed) == 100 })
	mustEqual(t, "parked", countState(t, d, lease.Failed), 0)
	mustEqual(t, "stored once each", streamMsgs(t, stream), 100)
}

// An event whose topic no stream covers is a configuration mistake: the
// relay parks it at once with a reason that names the subject, and goes on
// publishing the others, instead of pausing forever as if the broker were
// down.
func TestJetStreamNoStreamParksWithTheSubject(t *testing.T) {
	d := testdb.SQLite(t)
	_, pub, stream := embeddedJetStream(t)
	o, _ := outbox.New(d, outbox.Config{})
	lost := outbox.Event{Type: "test.event", Topic: "nostream.orders", Payload: []byte("x")}
	enqueueTx(t, d, o, lost, ev("a", 0), ev("b", 0))
	r, _ := outbox.NewRelay(d, pub, fastRelay("r1"))
	startRelay(t, r)
	waitFor(t, "parked", func() bool { return countState(t, d, lease.Failed) == 1 })
	waitFor(t, "the others published", func() bool { return countState(t, d, lease.Completed) == 2 })
	mustEqual(t, "stored", streamMsgs(t, stream), 2)
	var reason string
	if err := d.Pool().QueryRow(context.Background(), `SELECT last_error FROM `+d.Table("outbox")+` WHERE state = $1`, lease.Failed).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, `no stream covers subject "nostream.orders"`) {
		t.Fatalf("parked with %q; want the reason to name the subject", reason)
	}
}

// crashAfterPublish publishes, then loses the broker's answer and stops
// the relay: a crash after the broker's ack, before the relay marks.
type crashAfterPublish struct {
	broker.ResultPublisher
	crash context.CancelFunc
}

// errCrashed is the answer the crashed relay never got.
var errCrashed = errors.New("crashed after the broker's ack")

func (p crashAfterPublish) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := p.ResultPublisher.Publish(ctx, msgs...); err != nil {
		return err
	}
	p.crash()
	return errCrashed
}

func (p crashAfterPublish) PublishResults(ctx context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	if _, err := p.ResultPublisher.PublishResults(ctx, msgs...); err != nil {
		return nil, err
	}
	p.crash()
	return nil, errCrashed
}

// startRelay runs r until the test ends.
func startRelay[TTx any](t testing.TB, r *outbox.Relay[TTx]) { startRelayStop(t, r) }

// waitFor polls cond until it holds or 60s pass (a progress bound, not a
// timing assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fastRelay(name string) outbox.RelayConfig {
	return outbox.RelayConfig{
		Name:         name,
		BatchSize:    200,
		PollInterval: 20 * time.Millisecond,
		ClaimTTL:     2 * time.Second,
		BaseBackoff:  5 * time.Millisecond,
		MaxBackoff:   50 * time.Millisecond,
	}
}

func countState[TTx any](t testing.TB, d store.Driver[TTx], state string) int {
	return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE state = $1`, state)
}

func ev(key string, n int) outbox.Event {
	return outbox.Event{Type: "test.event", Topic: "test." + key, Key: key, Payload: []byte(key + ":" + strconv.Itoa(n))}
}

func enqueueTx[TTx any](t testing.TB, d store.Driver[TTx], o *outbox.Outbox[TTx], evs ...outbox.Event) {
	t.Helper()
	err := store.InTx(context.Background(), d, func(tx TTx) error {
		_, err := o.EnqueueTx(context.Background(), tx, evs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustEqual[T comparable](t testing.TB, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}
