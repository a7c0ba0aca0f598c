package idemmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// recorder is a broker.Publisher that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	msgs []idem.Message
}

func (p *recorder) Publish(_ context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recorder) Close() error { return nil }

func (p *recorder) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// enqueued opens a fresh migrated database and enqueues evs in one
// transaction: the store, its outbox and the events as stored (seqs set).
func enqueued(t *testing.T, evs ...outbox.Event) (*idemmysql.Driver, *outbox.Outbox[*sql.Tx], []outbox.Event) {
	t.Helper()
	d := idemmysqltest.Open(t)
	ctx := context.Background()
	o, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var out []outbox.Event
	if err := store.InTx(ctx, d, func(tx *sql.Tx) error { out, err = o.EnqueueTx(ctx, tx, evs...); return err }); err != nil {
		t.Fatal(err)
	}
	return d, o, out
}

// orders is n events of topic orders, keyed by keys in turn ("" for none).
func orders(n int, keys ...string) []outbox.Event {
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{Type: "order.created", Topic: "orders", Key: keys[i%len(keys)], Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
	}
	return evs
}

// The relay with DeletePublished on MySQL/MariaDB: the multi-table DELETE
// joined with JSON_TABLE removes the published rows and only them (the
// relay deletes a batch in the transaction that claims the next, so a
// delete that ignored its seqs would take unpublished rows and the count
// of published events would fall short), and every event is published.
func TestRelayDeletePublished(t *testing.T) {
	t.Parallel()
	const n = 40
	d, _, _ := enqueued(t, orders(n, "", "a", "b")...)
	ctx := context.Background()
	pub := &recorder{}
	r, err := outbox.NewRelay(d, pub, outbox.RelayConfig{Name: "deleting", BatchSize: 16, PollInterval: 20 * time.Millisecond, DeletePublished: true})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	rows := func() int {
		var c int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("outbox")).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(30 * time.Second)
	for pub.count() < n || rows() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("published %d of %d, %d rows left", pub.count(), n, rows())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := pub.count(); got != n {
		t.Fatalf("published %d messages, want %d", got, n)
	}
}

// stalled is a broker.Publisher that holds every publish until its context
// ends, so a test can look at the rows while the relay has them claimed.
type stalled struct{ started chan struct{} }

func (p *stalled) Publish(ctx context.Context, _ ...idem.Message) error {
	select {
	case p.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

func (p *stalled) Close() error { return nil }

// A claim keeps claimed_by 16 bytes wide (migration 0019): a new row
// holds 16 zero bytes, a claim writes the first 16 bytes of the SHA-256 of
// the relay's name, and
// releasing, parking and retrying write the zero bytes again, so InnoDB
// rewrites the row in place; a published row's mark empties it. The
// hashed name still fences: a relay that stops releases its own claims and
// leaves another relay's alone.
func TestRelayClaimKeepsTheRowWidth(t *testing.T) {
	t.Parallel()
	const n = 6
	d, o, _ := enqueued(t, orders(n, "", "a")...)
	ctx := context.Background()
	tbl := d.Table("outbox")
	count := func(where string, args ...any) int {
		t.Helper()
		var c int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+tbl+` WHERE `+where, args...).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	const unclaimed = `claimed_by = x'00000000000000000000000000000000' AND claim_until = 0`
	if got := count(unclaimed); got != n {
		t.Fatalf("%d of %d new rows hold the unclaimed value", got, n)
	}

	// Another relay's live claim (one that took a row over after a lease
	// ran out, say), on the last keyless row.
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET claimed_by = LEFT(UNHEX(SHA2('other', 256)), 16), claim_until = 9000000000000000 WHERE ordering_key = '' ORDER BY seq DESC LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	others := count(`claimed_by = LEFT(UNHEX(SHA2('other', 256)), 16)`)
	if others != 1 {
		t.Fatalf("%d rows under another relay's claim, want 1", others)
	}

	pub := &stalled{started: make(chan struct{}, 1)}
	r, err := outbox.NewRelay(d, pub, outbox.RelayConfig{Name: "relay-with-a-long-name-0123456789", BatchSize: n, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	waitStarted(t, pub.started)
	if got := count(`claimed_by = LEFT(UNHEX(SHA2($1, 256)), 16) AND claim_until > 0 AND LENGTH(claimed_by) = 16`, "relay-with-a-long-name-0123456789"); got != n-others {
		t.Fatalf("%d rows claimed under the relay's hashed name while it publishes, want %d", got, n-others)
	}
	stop()
	if got := count(`claimed_by = LEFT(UNHEX(SHA2('other', 256)), 16) AND claim_until > 0`); got != others {
		t.Fatalf("the stopped relay released another relay's claim: %d of %d left", got, others)
	}
	if got := count(`claimed_by = LEFT(UNHEX(SHA2($1, 256)), 16)`, "relay-with-a-long-name-0123456789"); got != 0 {
		t.Fatalf("%d claims left after the relay stopped; want them released", got)
	}
	if got := count(unclaimed); got != n-others {
		t.Fatalf("%d rows unclaimed after the stop, want %d", got, n-others)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET claimed_by = x'00000000000000000000000000000000', claim_until = 0`); err != nil {
		t.Fatal(err)
	}

	// A relay that fails every publish parks the events (fenced by its
	// hashed name); retrying them and publishing them keep the width.
	failing, err := outbox.NewRelay(d, failPub{}, outbox.RelayConfig{Name: "failing", BatchSize: n, PollInterval: 20 * time.Millisecond, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, failing, func() bool { return count(`state = 'failed'`) > 0 })
	if got := count(`state = 'failed' AND ` + unclaimed); got == 0 || got != count(`state = 'failed'`) {
		t.Fatalf("%d parked rows hold the unclaimed value, of %d parked", got, count(`state = 'failed'`))
	}
	if _, err := o.RetryParked(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(`state = 'pending' AND ` + unclaimed); got != n {
		t.Fatalf("%d of %d retried rows hold the unclaimed value", got, n)
	}
	rec := &recorder{}
	publishing, err := outbox.NewRelay(d, rec, outbox.RelayConfig{Name: "publishing", BatchSize: n, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, publishing, func() bool { return count(`state = 'completed'`) == n })
	// A published row is never claimed again: its mark empties the column
	// (a shorter record fits where it was).
	if got := count(`state = 'completed' AND claimed_by = '' AND claim_until = 0`); got != n {
		t.Fatalf("%d of %d published rows have claimed_by emptied", got, n)
	}
}

// failPub refuses every publish for good (a message the broker rejects).
type failPub struct{}

func (failPub) Publish(context.Context, ...idem.Message) error {
	return idem.Permanent(errors.New("broker refused the message"))
}
func (failPub) Close() error { return nil }

// start runs r until stop is called or the test ends; Run's error fails
// the test.
func start(t *testing.T, r *outbox.Relay[*sql.Tx]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// runUntil runs r until done reports true (at most 30 s), then stops it.
func runUntil(t *testing.T, r *outbox.Relay[*sql.Tx], done func() bool) {
	t.Helper()
	stop := start(t, r)
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not get there in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heldFail is a broker.Publisher whose publishes wait until release is
// closed, then fail for good.
type heldFail struct {
	started chan struct{}
	release chan struct{}
}

func (p *heldFail) Publish(ctx context.Context, _ ...idem.Message) error {
	select {
	case p.started <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return idem.Permanent(errors.New("broker refused the message"))
}

func (p *heldFail) Close() error { return nil }

// A relay records a failure only on the rows it still has claimed: an
// event another relay took over while the publish was out keeps that
// relay's claim and its attempts (Fail compares the hashed name), and the
// relay's own event is parked.
func TestRelayFailIsFencedByTheHashedName(t *testing.T) {
	t.Parallel()
	d, _, out := enqueued(t, orders(2, "")...)
	ctx := context.Background()
	pub := &heldFail{started: make(chan struct{}, 1), release: make(chan struct{})}
	parked := make(chan int64, len(out))
	r, err := outbox.NewRelay(d, pub, outbox.RelayConfig{Name: "first", BatchSize: len(out), PollInterval: 20 * time.Millisecond, MaxAttempts: 1,
		OnParked: func(_ context.Context, ev outbox.Event, _ error) { parked <- ev.Seq }})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	waitStarted(t, pub.started)
	tbl := d.Table("outbox")
	// Another relay takes the first event over while the publish is out.
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET claimed_by = LEFT(UNHEX(SHA2('second', 256)), 16), claim_until = 9000000000000000 WHERE seq = $1`, out[0].Seq); err != nil {
		t.Fatal(err)
	}
	close(pub.release)
	select {
	case seq := <-parked:
		if seq != out[1].Seq {
			t.Fatalf("parked seq %d, want the relay's own event %d", seq, out[1].Seq)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay's own event was not parked in 30 s")
	}
	var state string
	var attempts int
	var mine int
	if err := d.Pool().QueryRow(ctx, `SELECT state, attempts, claimed_by = LEFT(UNHEX(SHA2('second', 256)), 16) FROM `+tbl+` WHERE seq = $1`, out[0].Seq).Scan(&state, &attempts, &mine); err != nil {
		t.Fatal(err)
	}
	if state != "pending" || attempts != 0 || mine != 1 {
		t.Fatalf("the taken-over event: state %s, %d attempts, still the other relay's claim: %v; want pending, 0, true", state, attempts, mine == 1)
	}
	if err := d.Pool().QueryRow(ctx, `SELECT state, attempts FROM `+tbl+` WHERE seq = $1 AND claimed_by = x'00000000000000000000000000000000'`, out[1].Seq).Scan(&state, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != "failed" || attempts != 1 {
		t.Fatalf("the relay's own event: state %s, %d attempts; want failed, 1", state, attempts)
	}
}

// waitStarted waits (at most 30 s) for a publisher's first publish.
func waitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay published nothing in 30 s")
	}
}
