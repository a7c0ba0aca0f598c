package outbox

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// onePool returns a pgx driver on d's database and schema whose pool has a
// single connection, named app in pg_stat_activity.
func onePool(t *testing.T, d *pgxstore.Driver, app string) *pgxstore.Driver {
	t.Helper()
	cfg := d.PgxPool().Config()
	cfg.MaxConns, cfg.MinConns = 1, 0
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	one, err := pgxstore.New(pool, pgxstore.Config{Names: d.Names()})
	if err != nil {
		t.Fatal(err)
	}
	return one
}

// notifyOnlyRelay runs a relay on a pool of one connection named app that
// only NOTIFY wakes (it polls and re-checks once an hour), once it has
// published a first event; it returns the outbox to enqueue through on d
// (every enqueue notifies) and the relay's publisher.
func notifyOnlyRelay(t *testing.T, d *pgxstore.Driver, app string) (*Outbox[pgx.Tx], *fakePub) {
	t.Helper()
	o, err := New(d, Config{NotifyInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	pub := &fakePub{}
	cfg := fastRelay(app)
	cfg.PollInterval, cfg.Recheck = time.Hour, time.Hour
	r, err := NewRelay(onePool(t, d, app), pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	enqueueTx(t, d, o, ev("warm", 0))
	startRelay(t, r) // its first round runs once it listens
	waitFor(t, "warm-up published", func() bool { return countState(t, d, lease.Completed) == 1 })
	return o, pub
}

// The relay listens, claims and marks on one connection of its own: on a
// pool of a single connection, which its LISTEN holds, it publishes events
// enqueued through another pool, woken by their notifications (it polls
// and re-checks once an hour). A relay that borrowed a pool connection for
// each round waited for that pool forever.
func TestRelayOnOneConnection(t *testing.T) {
	d := testdb.Pgx(t)
	o, pub := notifyOnlyRelay(t, d, "idem-test-relay-one")
	for i := range 5 {
		enqueueTx(t, d, o, ev("k", i))
		waitFor(t, "an event published on its notification", func() bool { return countState(t, d, lease.Completed) == 2+i })
	}
	checkKeyOrder(t, pub.snapshot())
}

// When the server ends the relay's connection, the relay opens a new one
// at once and goes on listening (and claiming: its pool has one
// connection) on it: an event enqueued afterwards is published on its
// notification although the relay polls and re-checks once an hour.
func TestRelayReconnectsItsConnection(t *testing.T) {
	d := testdb.Pgx(t)
	const app = "idem-test-relay-reconnect"
	o, pub := notifyOnlyRelay(t, d, app)
	backend := func() int {
		return testdb.Count(t, d, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name = $1`, app)
	}
	old := backend()
	if old == 0 {
		t.Fatal("no backend of the relay's pool")
	}
	testdb.Exec(t, d, `SELECT pg_terminate_backend($1)`, old)
	waitFor(t, "a new connection of the relay", func() bool { b := backend(); return b != 0 && b != old })
	for i := range 3 {
		enqueueTx(t, d, o, ev("k", i))
		waitFor(t, "an event published after the reconnect", func() bool { return countState(t, d, lease.Completed) == 2+i })
	}
	checkKeyOrder(t, pub.snapshot())
}

// failFirstListen is a pgx driver whose first Listen fails.
type failFirstListen struct {
	*pgxstore.Driver
	calls atomic.Int32
}

func (f *failFirstListen) Listen(ctx context.Context, channel string) (store.Listener, error) {
	if f.calls.Add(1) == 1 {
		return nil, errors.New("injected: LISTEN failed")
	}
	return f.Driver.Listen(ctx, channel)
}

// A relay whose first LISTEN fails polls through the pool and opens its
// own connection later, rather than settling for a listening goroutine
// that holds a connection while rounds borrow another: on a pool of a
// single connection, that would wait forever.
func TestRelayOpensItsConnectionAfterAFailedListen(t *testing.T) {
	d := testdb.Pgx(t)
	one := &failFirstListen{Driver: onePool(t, d, "idem-test-relay-relisten")}
	o, _ := New(d, Config{NotifyInterval: -1})
	pub := &fakePub{}
	cfg := fastRelay("relisten")
	cfg.PollInterval = 50 * time.Millisecond // the next LISTEN attempt
	r, err := NewRelay(one, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	startRelay(t, r)
	for i := range 5 {
		enqueueTx(t, d, o, ev("k", i))
		waitFor(t, "an event published", func() bool { return countState(t, d, lease.Completed) == 1+i })
	}
	waitFor(t, "LISTEN tried again", func() bool { return one.calls.Load() >= 2 })
	enqueueTx(t, d, o, ev("k", 5))
	waitFor(t, "an event published after the relay listens", func() bool { return countState(t, d, lease.Completed) == 6 })
	checkKeyOrder(t, pub.snapshot())
}

// lockingPub publishes, then, the first time, locks the published events'
// rows in a transaction of its own (sent on locked), so that the relay's
// mark waits on the lock.
type lockingPub struct {
	fakePub
	d      *pgxstore.Driver
	locked chan pgx.Tx
	once   sync.Once
}

func (p *lockingPub) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := p.fakePub.Publish(ctx, msgs...); err != nil {
		return err
	}
	var err error
	p.once.Do(func() { err = p.lock() })
	return err
}

func (p *lockingPub) lock() error {
	tx, err := p.d.PgxPool().Begin(context.Background())
	if err != nil {
		return err
	}
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM `+p.d.Table("outbox")+` WHERE state = 'pending' FOR UPDATE`); err != nil {
		_ = tx.Rollback(context.Background())
		return err
	}
	p.locked <- tx
	return nil
}

// A relay stopped while a statement runs on its own connection (the mark,
// waiting on a row lock) loses that connection to the cancellation and
// returns; it does not log the loss as a broken connection it will reopen.
// (Its shutdown settle, waiting on the same lock, times out and says so.)
func TestRelayStoppedMidStatementDoesNotWarn(t *testing.T) {
	d := testdb.Pgx(t)
	o, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	pub := &lockingPub{d: d, locked: make(chan pgx.Tx, 1)}
	cfg := fastRelay("idem-test-relay-stop")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	enqueueTx(t, d, o, ev("a", 0))
	stop := startRelay(t, r)
	t.Cleanup(func() { // runs before startRelay's: stop, then free the lock
		_ = stop()
		select {
		case tx := <-pub.locked:
			_ = tx.Rollback(context.Background())
		default:
		}
	})
	var tx pgx.Tx
	select {
	case tx = <-pub.locked:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay published nothing")
	}
	defer tx.Rollback(context.Background())
	if s := logs.String(); !strings.Contains(s, "own_connection=true") {
		t.Fatalf("the relay does not work on its own connection:\n%s", s)
	}
	// The mark now waits on the lock: wait until the server says so.
	waitFor(t, "the relay's mark waiting on the row lock", func() bool {
		return testdb.Count(t, d, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%'`, d.Table("outbox")) > 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s := logs.String(); strings.Contains(s, "connection broke") {
		t.Fatalf("a stopped relay warned about its connection:\n%s", s)
	}
}

// A shutdown that comes after the server committed a claim, but before the
// relay read its answer, leaves nothing claimed. A proxy holds the server's
// replies from the claim on; Run's context is cancelled, and the replies
// released later. Before, the relay gave up on the claim (its cancel
// request came too late to stop it), so nothing released the claimed rows:
// they stayed claimed for ClaimTTL, holding back their keys on every relay.
func TestShutdownAfterACommittedClaimReleasesIt(t *testing.T) {
	d, p := pgproxy.Pgx(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	direct, _ := testdb.PgxPool(t) // not through the proxy, whose replies are held
	ctx := context.Background()
	o, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueueTx(t, d, o, ev("k", 0), ev("k", 1), ev("", 2))
	claimed := func() int {
		var n int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE claimed_by <> '' OR claim_until <> 0`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cfg := fastRelay("stopped-after-claim")
	cfg.ClaimTTL = time.Minute
	r, err := NewRelay(d, &fakePub{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.HoldRepliesAfter(func(m pgproxy.Message) bool { return strings.Contains(m.SQL(), "pg_advisory_xact_lock") })
	stop := startRelay(t, r)
	waitFor(t, "the claim committed, its answer held", func() bool { return p.Holding() && claimed() == 3 })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(300 * time.Millisecond) // the cancellation reaches the relay's statement
	p.Release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := claimed(); n != 0 {
		t.Fatalf("%d events left claimed after Run returned; want none", n)
	}
	var pending int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE state = 'pending'`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "pending", pending, 3)
}
