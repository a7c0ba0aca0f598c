package outbox

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/broker/jetstream"
	"github.com/idemkit/idem/broker/jetstream/embedded"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// embeddedJetStream starts an in-process JetStream server with a stream
// capturing "test.>" and returns it with a publisher and the stream.
func embeddedJetStream(t testing.TB) (*embedded.Server, *jetstream.Publisher, js.Stream) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, j, err := jetstream.Dial(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	stream, err := jetstream.EnsureStream(context.Background(), j, js.StreamConfig{Name: "TEST", Subjects: []string{"test.>"}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jetstream.NewPublisher(j, jetstream.PublisherConfig{})
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
	o, _ := New(d, Config{})
	var evs []Event
	for i := range 20 {
		evs = append(evs, ev(fmt.Sprintf("k%d", i%4), i/4))
	}
	enqueueTx(t, d, o, evs...)
	cfg := fastRelay("crashy")
	// The crash hook runs after a batch publish; on a loaded machine a
	// publish timeout would send the batch one by one instead (no hook:
	// r1 would never crash), so the timeout is generous.
	cfg.ClaimTTL = 2 * time.Second
	cfg.PublishTimeout = time.Second
	r1, _ := NewRelay(d, pub, cfg)
	r1.afterPublish = func([]Event) bool { return true }
	if err := r1.Run(context.Background()); err != errCrashed {
		t.Fatalf("Run = %v", err)
	}
	mustEqual(t, "stored after crash", streamMsgs(t, stream), 20)

	var dups atomic.Int64
	cfg.Name = "survivor"
	cfg.OnDuplicate = func(context.Context, Event) { dups.Add(1) }
	r2, _ := NewRelay(d, pub, cfg)
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
	o, _ := New(d, Config{})
	cfg := fastRelay("r1")
	cfg.MaxAttempts = 2
	cfg.PublishTimeout = 300 * time.Millisecond
	r, _ := NewRelay(d, pub, cfg)
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
	o, _ := New(d, Config{})
	lost := Event{Type: "test.event", Topic: "nostream.orders", Payload: []byte("x")}
	enqueueTx(t, d, o, lost, ev("a", 0), ev("b", 0))
	r, _ := NewRelay(d, pub, fastRelay("r1"))
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
