package pgxstore_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// requireBound fails t unless every message since the last Reset is a
// Bind/Describe/Execute/Sync of a prepared statement (no Parse), or the
// simple query simple (a constant text; "" allows none), and the values
// appear in Bind messages only.
func requireBound(t *testing.T, p *pgproxy.Proxy, simple string, values ...string) {
	t.Helper()
	noValueOutsideBind(t, p, simple, values...)
	for _, m := range p.Sent() {
		switch m.Type {
		case 'B', 'D', 'E', 'S', 'Q':
		default:
			t.Errorf("message %q sent (SQL %q), want only Bind/Describe/Execute/Sync of prepared statements", m.Type, m.SQL())
		}
	}
}

// noValueOutsideBind fails t when a value appears in a message other than a
// Bind, or a simple query other than simple ("" for none) is sent.
func noValueOutsideBind(t *testing.T, p *pgproxy.Proxy, simple string, values ...string) {
	t.Helper()
	for _, m := range p.Sent() {
		if m.Type == 'Q' && (simple == "" || m.SQL() != simple) {
			t.Errorf("simple query %q sent", m.SQL())
		}
		for _, v := range values {
			if m.Type != 'B' && bytes.Contains(m.Body, []byte(v)) {
				t.Errorf("value %q sent inside a %q message", v, m.Type)
			}
		}
	}
}

const hostile = `x\';COMMIT;DROP/**/TABLE/**/victim;--`

// BeginInsert costs one round trip (BEGIN and INSERT together) and
// ExecCommit one (statement and COMMIT together), as when they rendered
// literals: on a connection that has run them once, they send prepared
// statements with bound values and nothing else. A duplicate costs the
// batch and the ROLLBACK, and does not make the next call dearer.
func TestRoundTrips(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE rt (k text PRIMARY KEY, b bytea NOT NULL, n bigint NOT NULL, v text NOT NULL DEFAULT '')`)
	testdb.Exec(t, d, `CREATE TABLE victim (x integer)`)
	const ins = `INSERT INTO rt (k, b, n) VALUES ($1, $2, $3)`
	const upd = `UPDATE rt SET v = $2 WHERE k = $1`
	run := func(k string) (begin, commit int) {
		t.Helper()
		p.Reset()
		tx, inserted, ok, err := d.BeginInsert(ctx, ins, k, []byte(k), int64(len(k)))
		if err != nil || !ok || !inserted {
			t.Fatalf("BeginInsert %q: inserted=%v ok=%v err=%v", k, inserted, ok, err)
		}
		begin = p.RoundTrips()
		requireBound(t, p, "", k)
		if _, err := tx.Exec(ctx, `SET LOCAL standard_conforming_strings = off`); err != nil {
			t.Fatal(err)
		}
		p.Reset()
		done, err := d.ExecCommit(ctx, tx, upd, k, k)
		if !done || err != nil {
			t.Fatalf("ExecCommit %q: done=%v err=%v", k, done, err)
		}
		commit = p.RoundTrips()
		requireBound(t, p, "", k)
		return begin, commit
	}
	// The first use on a connection prepares the statements: one round
	// trip per statement, once per connection.
	p.Reset()
	if tx, _, _, err := d.BeginInsert(ctx, ins, "warm", []byte{}, int64(0)); err != nil {
		t.Fatal(err)
	} else if _, err := d.ExecCommit(ctx, tx, upd, "warm", "warm"); err != nil {
		t.Fatal(err)
	}
	t.Logf("first use on a connection: %d round trips for BeginInsert + ExecCommit", p.RoundTrips())
	// The SQL text that went out is the constant statements, nothing else.
	for _, m := range p.Sent() {
		switch sql := m.SQL(); {
		case m.Type == 'Q':
			t.Errorf("simple query %q sent", sql)
		case m.Type == 'P' && sql != "BEGIN" && sql != ins && sql != upd && sql != "COMMIT":
			t.Errorf("statement %q prepared, want only the constant statements", sql)
		}
	}
	for i, k := range []string{hostile, `it's`, `back\slash`} {
		begin, commit := run(k)
		if begin != 1 || commit != 1 {
			t.Fatalf("key %d: BeginInsert %d round trips, ExecCommit %d; want 1 and 1", i, begin, commit)
		}
		var v string
		if err := d.PgxPool().QueryRow(ctx, `SELECT v FROM rt WHERE k = $1`, k).Scan(&v); err != nil || v != k {
			t.Fatalf("key %q stored as %q (%v)", k, v, err)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'victim'`); n != 1 {
		t.Fatal("table victim was dropped")
	}

	// A duplicate: the batch, then the ROLLBACK of the aborted transaction.
	p.Reset()
	if _, inserted, ok, err := d.BeginInsert(ctx, ins, hostile, []byte{}, int64(0)); err != nil || !ok || inserted {
		t.Fatalf("duplicate: inserted=%v ok=%v err=%v", inserted, ok, err)
	}
	if n := p.RoundTrips(); n != 2 {
		t.Fatalf("duplicate: %d round trips, want 2 (batch, ROLLBACK)", n)
	}
	// The failed batch did not cost the statements their preparation.
	if begin, commit := run("after-duplicate"); begin != 1 || commit != 1 {
		t.Fatalf("after a duplicate: BeginInsert %d round trips, ExecCommit %d; want 1 and 1", begin, commit)
	}
}

// An inbox first delivery with a handler that writes one row costs three
// round trips: BEGIN+INSERT, the handler's statement, COMMIT.
func TestRoundTripsInboxFirstDelivery(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE rt_effects (id text NOT NULL)`)
	in, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO rt_effects (id) VALUES ($1)`, msg.ID)
		return err
	}
	for i, id := range []string{"warm", hostile, strings.Repeat("'", 40)} {
		p.Reset()
		res, err := in.Process(ctx, "c", idem.Message{ID: id, Attempt: 1, Payload: []byte(`{}`)}, h)
		if err != nil || res != inbox.Processed {
			t.Fatalf("%q: %v %v", id, res, err)
		}
		if i == 0 {
			continue // prepares the statements on the connection
		}
		// Measured on the literal-rendering code before this change: 3.
		if n := p.RoundTrips(); n != 3 {
			t.Fatalf("%q: %d round trips, want 3", id, n)
		}
		requireBound(t, p, "commit", id)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM rt_effects`); n != 3 {
		t.Fatalf("%d effects, want 3", n)
	}
}

// In every extended-protocol exec mode the fast paths bind their values and
// keep their round trips; in the simple protocol, where pgx would write the
// values into the SQL text, BeginInsert declines.
func TestExecModes(t *testing.T) {
	modes := []struct {
		mode          pgx.QueryExecMode
		begin, commit int // round trips once the connection has run them
	}{
		{pgx.QueryExecModeCacheStatement, 1, 1},
		{pgx.QueryExecModeCacheDescribe, 1, 1},
		{pgx.QueryExecModeExec, 1, 1},
		{pgx.QueryExecModeDescribeExec, 2, 2}, // describes every statement first, by design
		{pgx.QueryExecModeSimpleProtocol, 0, 0},
	}
	for _, m := range modes {
		t.Run(m.mode.String(), func(t *testing.T) {
			t.Parallel()
			d, p := pgproxy.Pgx(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = m.mode })
			ctx := context.Background()
			testdb.Exec(t, d, `CREATE TABLE em (k text PRIMARY KEY, v text NOT NULL DEFAULT '')`)
			for i, k := range []string{"warm", hostile} {
				p.Reset()
				tx, inserted, ok, err := d.BeginInsert(ctx, `INSERT INTO em (k) VALUES ($1)`, k)
				if m.mode == pgx.QueryExecModeSimpleProtocol {
					if ok || err != nil || tx != nil || p.RoundTrips() != 0 {
						t.Fatalf("simple protocol: ok=%v err=%v round trips=%d, want declined", ok, err, p.RoundTrips())
					}
					return
				}
				if err != nil || !ok || !inserted {
					t.Fatalf("%q: %v %v %v", k, inserted, ok, err)
				}
				begin := p.RoundTrips()
				noValueOutsideBind(t, p, "", k)
				p.Reset()
				if done, err := d.ExecCommit(ctx, tx, `UPDATE em SET v = $1 WHERE k = $1`, k); !done || err != nil {
					t.Fatalf("%q: %v %v", k, done, err)
				}
				commit := p.RoundTrips()
				noValueOutsideBind(t, p, "", k)
				if i > 0 && (begin != m.begin || commit != m.commit) {
					t.Fatalf("round trips: BeginInsert %d, ExecCommit %d; want %d and %d", begin, commit, m.begin, m.commit)
				}
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM em WHERE k = v AND k = $1`, hostile); n != 1 {
				t.Fatal("value not stored verbatim")
			}
		})
	}
}

// A statement the fast paths prepared and someone deallocated (DEALLOCATE
// ALL on the session) costs at most the request that did it: BeginInsert
// declines, ExecCommit reports the error, and the connection is replaced.
func TestDeallocatedStatements(t *testing.T) {
	d, _ := pgproxy.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE da (k text PRIMARY KEY, v text NOT NULL DEFAULT '')`)
	const ins = `INSERT INTO da (k) VALUES ($1)`
	const upd = `UPDATE da SET v = 'done' WHERE k = $1`
	roundTrip := func(k string) error {
		tx, inserted, ok, err := d.BeginInsert(ctx, ins, k)
		if err != nil || !ok || !inserted {
			t.Fatalf("%s: BeginInsert inserted=%v ok=%v err=%v", k, inserted, ok, err)
		}
		done, err := d.ExecCommit(ctx, tx, upd, k)
		if !done {
			t.Fatalf("%s: ExecCommit declined", k)
		}
		return err
	}
	if err := roundTrip("warm"); err != nil {
		t.Fatal(err)
	}
	// Inside the transaction: ExecCommit's statements are gone.
	tx, _, _, err := d.BeginInsert(ctx, ins, "in-tx")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DEALLOCATE ALL`); err != nil {
		t.Fatal(err)
	}
	if done, err := d.ExecCommit(ctx, tx, upd, "in-tx"); !done || err == nil {
		t.Fatalf("ExecCommit after DEALLOCATE ALL: done=%v err=%v, want an error", done, err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM da WHERE k = 'in-tx'`); n != 0 {
		t.Fatal("a failed ExecCommit left its insert")
	}
	if err := roundTrip("after-in-tx"); err != nil {
		t.Fatalf("the next request: %v", err)
	}
	// On the session, between transactions: BeginInsert declines once.
	if _, err := d.PgxPool().Exec(ctx, `DEALLOCATE ALL`); err != nil {
		t.Fatal(err)
	}
	if tx, _, ok, err := d.BeginInsert(ctx, ins, "declined"); ok || err != nil || tx != nil {
		t.Fatalf("BeginInsert after DEALLOCATE ALL: ok=%v err=%v, want declined", ok, err)
	}
	if err := roundTrip("after-session"); err != nil {
		t.Fatalf("the next request: %v", err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM da WHERE v = 'done'`); n != 3 {
		t.Fatalf("%d completed rows, want 3", n)
	}
}
