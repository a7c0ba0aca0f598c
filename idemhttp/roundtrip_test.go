package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// statements is the number of statements executed (Execute messages)
// since the last Reset.
func statements(p *pgproxy.Proxy) int {
	n := 0
	for _, m := range p.Sent() {
		if m.Type == 'E' {
			n++
		}
	}
	return n
}

// noTextNoValue fails t when the messages since the last Reset carry SQL
// text (the statements are prepared once per connection) or the key
// outside a Bind.
func noTextNoValue(t *testing.T, p *pgproxy.Proxy, what, key string) {
	t.Helper()
	for _, m := range p.Sent() {
		if m.Type == 'Q' || m.Type == 'P' {
			t.Errorf("%s: SQL text sent (%q): want prepared statements only", what, m.SQL())
		}
		if m.Type != 'B' && strings.Contains(string(m.Body), key) {
			t.Errorf("%s: the key was sent inside a %q message", what, m.Type)
		}
	}
}

// The round trips of each fast path on pgx, counted at the wire, on a
// connection that has prepared its statements: a first request costs
// what the same handler costs without the middleware (BEGIN, INSERT,
// COMMIT: 3), a replay 1 and a mismatch 1, each ONE statement (the lock
// and the read in one, the lock released by it).
func TestRoundTripsFastPathsPgx(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	e := newEnv(t, d)
	a := &app{}
	h := e.handler(t, idemhttp.Config{}, a)
	plain := func() {
		t.Helper()
		tx, err := d.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO orders (tenant, idem_key, exec, body) VALUES ($1, $2, $3, $4)`, "acme", "plain", int64(0), "{}"); err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	// Warm-up: the first use of each statement on the connection
	// prepares it.
	plain()
	wantStatus(t, do(h, req{tenant: "acme", key: "warm", body: `{"qty":1}`}), 201)
	wantStatus(t, do(h, req{tenant: "acme", key: "warm", body: `{"qty":1}`}), 201)
	wantStatus(t, do(h, req{tenant: "acme", key: "warm", body: `{"qty":2}`}), 422)

	p.Reset()
	plain()
	plainTrips := p.RoundTrips()
	if plainTrips != 3 {
		t.Fatalf("the plain handler costs %d round trips, want 3 (BEGIN, INSERT, COMMIT)", plainTrips)
	}
	for _, key := range []string{"k1", injectionKey, `it's-\-a-key`} {
		p.Reset()
		first := do(h, req{tenant: "acme", key: key, body: `{"qty":1}`})
		wantStatus(t, first, 201)
		if n := p.RoundTrips(); n != plainTrips {
			t.Fatalf("%q: first request %d round trips, want the plain handler's %d", key, n, plainTrips)
		}
		noTextNoValue(t, p, "first request", key)

		p.Reset()
		wantReplay(t, do(h, req{tenant: "acme", key: key, body: `{"qty":1}`}), first)
		if n := p.RoundTrips(); n != 1 {
			t.Fatalf("%q: replay %d round trips, want 1", key, n)
		}
		if n := statements(p); n != 1 {
			t.Fatalf("%q: replay %d statements, want 1 (lock and read in one)", key, n)
		}
		noTextNoValue(t, p, "replay", key)

		p.Reset()
		wantProblem(t, do(h, req{tenant: "acme", key: key, body: `{"qty":2}`}), 422, idemhttp.TypeKeyReused)
		if n := p.RoundTrips(); n != 1 {
			t.Fatalf("%q: mismatch %d round trips, want 1", key, n)
		}
		if n := statements(p); n != 1 {
			t.Fatalf("%q: mismatch %d statements, want 1 (lock and read in one)", key, n)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM orders WHERE idem_key <> 'plain'`); n != 4 || a.execs.Load() != 4 {
		t.Fatalf("%d orders, %d executions; want 4 (warm-up and three keys)", n, a.execs.Load())
	}
}

// A concurrent duplicate on pgx waits on the key's lock while the first
// execution runs, then replays it from its one read: after the first is
// inside its handler, the wire sees the first's end (record, COMMIT,
// unlock) and the duplicate's lock+read (one statement), 2 round trips,
// and the handler ran once.
func TestRoundTripsConcurrentDuplicatePgx(t *testing.T) {
	d, p := pgproxy.Pgx(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	e := newEnv(t, d)
	var (
		mode    atomic.Int32 // 1: warm-up barrier, 2: the first execution blocks
		barrier sync.WaitGroup
		entered = make(chan struct{})
		release = make(chan struct{})
		once    sync.Once
	)
	a := &app{hook: func(*http.Request) int {
		switch mode.Load() {
		case 1:
			barrier.Done()
			barrier.Wait()
		case 2:
			once.Do(func() { close(entered); <-release })
		}
		return 0
	}}
	h := e.handler(t, idemhttp.Config{}, a)
	// Warm-up on both connections at once (each prepares its statements).
	mode.Store(1)
	barrier.Add(2)
	var wg sync.WaitGroup
	for _, k := range []string{"w1", "w2"} {
		wg.Go(func() {
			wantStatus(t, do(h, req{tenant: "acme", key: k, body: `{}`}), 201)
			wantStatus(t, do(h, req{tenant: "acme", key: k, body: `{}`}), 201)
		})
	}
	wg.Wait()

	mode.Store(2)
	firstDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { firstDone <- do(h, req{tenant: "acme", key: "dup", body: `{}`}) }()
	<-entered
	p.Reset()
	dupDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { dupDone <- do(h, req{tenant: "acme", key: "dup", body: `{}`}) }()
	waitForLockWaiter(t)
	close(release)
	first, dup := <-firstDone, <-dupDone
	wantStatus(t, first, 201)
	wantReplay(t, dup, first)
	if n := p.RoundTrips(); n != 2 {
		t.Fatalf("%d round trips after the first entered its handler, want 2 (its end, the duplicate's lock+read)", n)
	}
	if n := statements(p); n != 4 {
		t.Fatalf("%d statements after the first entered its handler, want 4 (its record, COMMIT and unlock; the duplicate's lock+read)", n)
	}
	if n := e.count(t, `SELECT count(*) FROM orders WHERE idem_key = 'dup'`); n != 1 || a.execs.Load() != 3 {
		t.Fatalf("%d orders for the key, %d executions in all; want 1 and 3 (2 warm-up)", n, a.execs.Load())
	}
}

// waitForLockWaiter returns once some session waits for an advisory lock
// (the duplicate, blocked on the key), seen from a connection of its own.
func waitForLockWaiter(t *testing.T) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for range 2000 {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no session ever waited on an advisory lock")
}

// The lock serialises; the primary key decides. A writer that does not
// take the lock (here the test itself, standing for a two-phase
// middleware or an older version) records the key while the handler runs:
// the completed record's INSERT is a unique violation, nothing of the
// handler's commits, and the request is answered from that record.
func TestPrimaryKeyDecidesOverLockPgx(t *testing.T) {
	d := testdb.Pgx(t)
	e := newEnv(t, d)
	var other atomic.Bool
	a := &app{hook: func(r *http.Request) int {
		if other.CompareAndSwap(false, true) {
			// Another writer's completed record for this very key, committed
			// on the pool while the request's transaction is open.
			now := store.Micros(time.Now())
			fp := make([]byte, 32)
			_, err := d.Pool().Exec(r.Context(), d.Statements().HTTPKeys.InsertCompleted,
				"acme", "POST /orders", "raced", fp, int64(201), `{}`, []byte(`{"other":true}`), int64(0), "", "", now, now, now+int64(time.Hour/time.Microsecond))
			if err != nil {
				t.Errorf("the other writer's insert: %v", err)
			}
		}
		return 0
	}}
	h := e.handler(t, idemhttp.Config{}, a)
	w := do(h, req{tenant: "acme", key: "raced", body: `{}`})
	// The other record's fingerprint is not this request's: 422, from its
	// record, never this handler's response.
	wantProblem(t, w, 422, idemhttp.TypeKeyReused)
	if n := e.count(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d orders committed; the handler's work must roll back with the failed record", n)
	}
	if n := e.count(t, `SELECT count(*) FROM `+e.keys+` WHERE idem_key = 'raced' AND body = $1`, []byte(`{"other":true}`)); n != 1 {
		t.Fatal("the other writer's record is not the one kept")
	}
}
