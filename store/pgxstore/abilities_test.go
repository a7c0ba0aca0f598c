package pgxstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// SendBatch on the pool is one round trip and one implicit transaction:
// a transaction-scoped setting and advisory lock last from one statement
// to the next and end with the batch; rows and affected counts reach their
// statements.
func TestSendBatchPoolIsOneTransaction(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	if !d.SupportsPipeline() {
		t.Fatal("SupportsPipeline = false on the default exec mode")
	}
	testdb.Exec(t, d, `CREATE TABLE sb (k text PRIMARY KEY, n bigint NOT NULL)`)
	testdb.Exec(t, d, `INSERT INTO sb VALUES ('a', 1), ('b', 2), ('c', 3)`)
	var setting string
	var locks int64
	var got []string
	var affected int64
	stmts := func() []store.Stmt {
		setting, locks, got, affected = "", 0, nil, 0
		return []store.Stmt{
			{SQL: `SELECT pg_advisory_xact_lock($1::bigint), set_config('idem.sendbatch', $2::text, true)`, Args: []any{int64(4242), "on"}},
			{SQL: `SELECT current_setting('idem.sendbatch', true), (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objid = 4242)`,
				Rows: func(r store.Rows) error {
					for r.Next() {
						if err := r.Scan(&setting, &locks); err != nil {
							return err
						}
					}
					return nil
				}},
			{SQL: `UPDATE sb SET n = n + 1 WHERE n >= $1`, Args: []any{int64(2)}, Affected: &affected},
			{SQL: `SELECT k FROM sb ORDER BY k`, Rows: func(r store.Rows) error {
				for r.Next() {
					var k string
					if err := r.Scan(&k); err != nil {
						return err
					}
					got = append(got, k)
				}
				return nil
			}},
		}
	}
	// Warm-up: the first use prepares the statements.
	if err := d.SendBatch(ctx, d.Pool(), stmts()); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if err := d.SendBatch(ctx, d.Pool(), stmts()); err != nil {
		t.Fatal(err)
	}
	if n := p.RoundTrips(); n != 1 {
		t.Fatalf("SendBatch on the pool: %d round trips, want 1", n)
	}
	if setting != "on" || locks != 1 {
		t.Fatalf("inside the batch: setting %q, advisory locks %d; want on and 1 (one transaction)", setting, locks)
	}
	if affected != 2 || strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("affected %d rows %v, want 2 and a,b,c", affected, got)
	}
	// After the batch: the transaction ended, with its setting and lock.
	var after string
	if err := d.Pool().QueryRow(ctx, `SELECT coalesce(current_setting('idem.sendbatch', true), '')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "" {
		t.Fatalf("setting %q after the batch, want it gone with the transaction", after)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242`); n != 0 {
		t.Fatalf("%d advisory locks held after the batch", n)
	}
}

// A failing statement rolls the whole pool batch back, and its error is
// translated like any other statement's (the relay's old raw pgx.Batch
// returned pgconn errors).
func TestSendBatchPoolRollsBackAndTranslates(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE sb (k text PRIMARY KEY)`)
	testdb.Exec(t, d, `INSERT INTO sb VALUES ('dup')`)
	err := d.SendBatch(ctx, d.Pool(), []store.Stmt{
		{SQL: `INSERT INTO sb VALUES ($1)`, Args: []any{"new"}},
		{SQL: `INSERT INTO sb VALUES ($1)`, Args: []any{"dup"}},
		{SQL: `INSERT INTO sb VALUES ($1)`, Args: []any{"never"}},
	})
	if !errors.Is(err, store.ErrUniqueViolation) {
		t.Fatalf("err = %v, want store.ErrUniqueViolation", err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM sb`); n != 1 {
		t.Fatalf("%d rows after the failed batch, want 1 (rolled back)", n)
	}
	// The connection went back to the pool usable.
	if n := testdb.Count(t, d, `SELECT count(*) FROM sb WHERE k = 'dup'`); n != 1 {
		t.Fatal("pool unusable after a failed batch")
	}
	// An error returned by a Rows reader fails the batch too.
	boom := errors.New("reader refused")
	err = d.SendBatch(ctx, d.Pool(), []store.Stmt{
		{SQL: `INSERT INTO sb VALUES ($1)`, Args: []any{"x"}},
		{SQL: `SELECT k FROM sb`, Rows: func(store.Rows) error { return boom }},
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the reader's error", err)
	}
}

// SendBatch in a transaction joins it: nothing is visible outside before
// the commit, and a rollback undoes it.
func TestSendBatchInTx(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE sb (k text PRIMARY KEY)`)
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := d.SendBatch(ctx, d.Tx(tx), []store.Stmt{
		{SQL: `INSERT INTO sb VALUES ($1), ($2)`, Args: []any{"a", "b"}, Affected: &n},
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("affected %d, want 2", n)
	}
	if c := testdb.Count(t, d, `SELECT count(*) FROM sb`); c != 0 {
		t.Fatalf("%d rows visible before commit", c)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if c := testdb.Count(t, d, `SELECT count(*) FROM sb`); c != 0 {
		t.Fatalf("%d rows after rollback", c)
	}
}

// On a pool configured for the simple protocol SendBatch declines to
// pipeline and runs the statements one by one, with the same results.
func TestSendBatchSimpleProtocol(t *testing.T) {
	d, p := pgproxy.Pgx(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
	ctx := context.Background()
	if d.SupportsPipeline() {
		t.Fatal("SupportsPipeline = true on the simple protocol")
	}
	testdb.Exec(t, d, `CREATE TABLE sb (k text PRIMARY KEY)`)
	var n int64
	p.Reset()
	if err := d.SendBatch(ctx, d.Pool(), []store.Stmt{
		{SQL: `INSERT INTO sb VALUES ($1)`, Args: []any{"a"}},
		{SQL: `UPDATE sb SET k = $1 WHERE k = $2`, Args: []any{"b", "a"}, Affected: &n},
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 || p.RoundTrips() != 2 {
		t.Fatalf("affected %d in %d round trips, want 1 in 2 (one per statement)", n, p.RoundTrips())
	}
}

// Listen receives the notifications of its channel (pg_notify, delivered
// at commit), refuses a channel that is not a plain identifier, and Close
// releases the connection without handing a listening one back.
func TestListen(t *testing.T) {
	d := testdb.Pgx(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !d.SupportsListener() {
		t.Fatal("SupportsListener = false")
	}
	if _, err := d.Listen(ctx, `bad"channel`); err == nil {
		t.Fatal("Listen accepted a channel that is not a plain identifier")
	}
	const ch = "idem_Test_Listen" // mixed case: LISTEN quotes it, pg_notify names it as is
	l, err := d.Listen(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	err = store.InTx(ctx, d, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ch, "hello")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := l.Wait(ctx)
	if err != nil || payload != "hello" {
		t.Fatalf("Wait = %q, %v; want hello", payload, err)
	}
	// Wait ends with its context.
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = l.Wait(wctx)
	wcancel()
	if err == nil {
		t.Fatal("Wait returned without a notification")
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	// No connection in the pool is still listening.
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_listening_channels()`); n != 0 {
		t.Fatalf("a pooled connection listens on %d channels", n)
	}
}

// The listener is a store.QueryListener: statements run on the listening
// connection, a notification that arrives meanwhile is kept for the next
// Wait (or taken by Drain), and a Wait that ended with its context leaves
// the connection usable.
func TestListenerRunsStatements(t *testing.T) {
	d := testdb.Pgx(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ch = "idem_test_query_listener"
	l, err := d.Listen(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	ql, ok := l.(store.QueryListener)
	if !ok {
		t.Fatalf("%T is not a store.QueryListener", l)
	}
	notify := func(payload string) {
		t.Helper()
		if _, err := d.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, ch, payload); err != nil {
			t.Fatal(err)
		}
	}
	// A statement on the listening connection sees its own session: the
	// channel it listens on.
	var listening string
	err = d.SendBatch(ctx, ql.Querier(), []store.Stmt{{SQL: `SELECT pg_listening_channels()`, Rows: func(rows store.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&listening); err != nil {
				return err
			}
		}
		return rows.Err()
	}}})
	if err != nil || listening != ch {
		t.Fatalf("pg_listening_channels() on the listener's connection = %q, %v; want %q", listening, err, ch)
	}
	// A notification committed before a statement on the listening
	// connection is read with the statement's reply and kept: a Wait on a
	// context that is already done (which reads nothing) returns it.
	notify("kept")
	if _, err := ql.Querier().Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if payload, err := l.Wait(done); err != nil || payload != "kept" {
		t.Fatalf("Wait on a done context after the statement = %q, %v; want the kept notification", payload, err)
	}
	if ql.Broken() {
		t.Fatal("Broken after a statement")
	}
	// Drain takes kept notifications without waiting, and reports them.
	if ql.Drain() {
		t.Fatal("Drain reported a notification when none was kept")
	}
	notify("a")
	notify("b")
	if _, err := ql.Querier().Exec(ctx, `SELECT pg_sleep(0.1)`); err != nil { // receives both
		t.Fatal(err)
	}
	if !ql.Drain() {
		t.Fatal("Drain reported nothing after two notifications arrived during a statement")
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = l.Wait(wctx)
	wcancel()
	if err == nil {
		t.Fatal("Wait returned a notification Drain should have taken")
	}
	// The connection still runs statements and still listens after a
	// Wait that ended with its context.
	if _, err := ql.Querier().Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("a statement after a timed-out Wait: %v", err)
	}
	notify("after")
	if payload, err := l.Wait(ctx); err != nil || payload != "after" {
		t.Fatalf("Wait after a timed-out Wait = %q, %v", payload, err)
	}
	// A statement's error leaves the connection usable; a closed one is
	// Broken.
	if _, err := ql.Querier().Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("SELECT 1/0 succeeded")
	}
	if ql.Broken() {
		t.Fatal("Broken after a statement's error")
	}
	if _, err := ql.Querier().Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("a statement after a statement's error: %v", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !ql.Broken() {
		t.Fatal("not Broken after Close")
	}
}

// A pool whose settings would make a listening connection lose
// notifications during statements (an OnNotification hook of its own) or
// stretch or signal every timed wait (a cancel-request context handler)
// gets a listener that only waits.
func TestListenerOnlyWaitsUnderOtherSettings(t *testing.T) {
	base := testdb.Pgx(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, set := range map[string]func(*pgxpool.Config){
		"default": func(*pgxpool.Config) {},
		"OnNotification": func(c *pgxpool.Config) {
			c.ConnConfig.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) {}
		},
		"CancelRequestContextWatcherHandler": func(c *pgxpool.Config) {
			c.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
				return &pgconn.CancelRequestContextWatcherHandler{Conn: pc}
			}
		},
		"DeadlineDelay": func(c *pgxpool.Config) {
			c.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
				return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn(), DeadlineDelay: time.Second}
			}
		},
	} {
		cfg := base.PgxPool().Config()
		set(cfg)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		d, err := pgxstore.New(pool, pgxstore.Config{Names: base.Names()})
		if err != nil {
			t.Fatal(err)
		}
		l, err := d.Listen(ctx, "idem_test_settings")
		if err != nil {
			t.Fatal(err)
		}
		_, query := l.(store.QueryListener)
		if query != (name == "default") {
			t.Errorf("%s: the listener is a QueryListener: %v", name, query)
		}
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		pool.Close()
	}
}

// The driver classifies errors of a caller's own statements on its
// transactions (store.ErrorTranslator), as idem's batches need.
var _ store.ErrorTranslator = (*pgxstore.Driver)(nil)
