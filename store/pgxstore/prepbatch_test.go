package pgxstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// bothPaths runs f on a driver whose reserved statements travel as pgconn
// batches of prepared statements (the default) and on one whose pool has
// a tracer (pgx batches, which the tracer must see), each with the proxy
// that counts its round trips.
func bothPaths(t *testing.T, f func(t *testing.T, traced bool, tracer *batchCounter, d *pgxstore.Driver, p *pgproxy.Proxy)) {
	for _, traced := range []bool{false, true} {
		name := map[bool]string{false: "pgconn", true: "traced"}[traced]
		t.Run(name, func(t *testing.T) {
			tracer := &batchCounter{}
			var configure []func(*pgxpool.Config)
			if traced {
				configure = append(configure, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
			}
			d, p := pgproxy.Pgx(t, configure...)
			f(t, traced, tracer, d, p)
		})
	}
}

// batchCounter is a pgx.BatchTracer counting the batches it sees.
type batchCounter struct{ n atomic.Int64 }

func (c *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (*batchCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (*batchCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The statement lists of BeginReserved and EndReserved behave the same
// whether they travel as pgconn batches of prepared statements (the
// default) or as pgx batches (a pool with a tracer, which must see them):
// rows reach Rows, counts reach Affected, one round trip each, and a
// failing statement commits nothing, keeps no lock and reports the
// translated error.
func TestReservedLists(t *testing.T) {
	bothPaths(t, func(t *testing.T, traced bool, tracer *batchCounter, d *pgxstore.Driver, p *pgproxy.Proxy) {
		ctx := context.Background()
		testdb.Exec(t, d, `CREATE TABLE rl (k text PRIMARY KEY, v text NOT NULL DEFAULT '')`)
		testdb.Exec(t, d, `INSERT INTO rl (k, v) VALUES ('a', '1'), ('b', '2')`)
		const (
			lock   = `SELECT pg_advisory_lock($1::bigint)`
			unlock = `SELECT pg_advisory_unlock($1::bigint)`
			read   = `SELECT k, v FROM rl WHERE k = ANY($1) ORDER BY k`
			upd    = `UPDATE rl SET v = $2 WHERE k = ANY($1)`
			ins    = `INSERT INTO rl (k) VALUES ($1)`
			// Free: no other session holds the lock (other tests on the
			// server take advisory locks of their own).
			free = `SELECT pg_try_advisory_lock($1::bigint) AND pg_advisory_unlock($1::bigint)`
			key  = int64(7364213455)
		)
		for round := range 2 { // the first prepares the statements
			p.Reset()
			var got []string
			readRows := func(rows store.Rows) error {
				for rows.Next() {
					var k, v string
					if err := rows.Scan(&k, &v); err != nil {
						return err
					}
					got = append(got, k+"="+v)
				}
				return rows.Err()
			}
			tx, ok, err := d.BeginReserved(ctx, []store.Stmt{
				{SQL: lock, Args: []any{int64(5)}},
				{SQL: read, Args: []any{[]string{"a", "b", "c"}}, Rows: readRows},
			})
			if err != nil || !ok {
				t.Fatalf("BeginReserved ok %v err %v", ok, err)
			}
			if round == 1 && p.RoundTrips() != 1 {
				t.Fatalf("BeginReserved: %d round trips, want 1", p.RoundTrips())
			}
			if len(got) != 2 || got[0] != "a=1" || got[1] != "b=2" {
				t.Fatalf("rows read %q, want [a=1 b=2]", got)
			}
			p.Reset()
			var affected int64
			err = d.EndReserved(ctx, tx, true,
				[]store.Stmt{{SQL: upd, Args: []any{[]string{"a", "b"}, "x"}, Affected: &affected}},
				[]store.Stmt{{SQL: unlock, Args: []any{int64(5)}}})
			if err != nil {
				t.Fatalf("EndReserved: %v", err)
			}
			if round == 1 && p.RoundTrips() != 1 {
				t.Fatalf("EndReserved: %d round trips, want 1", p.RoundTrips())
			}
			if affected != 2 {
				t.Fatalf("Affected %d, want 2", affected)
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM rl WHERE v = 'x'`); n != 2 {
				t.Fatalf("%d rows updated and committed, want 2", n)
			}
			testdb.Exec(t, d, `UPDATE rl SET v = CASE k WHEN 'a' THEN '1' ELSE '2' END`)
		}

		// A unique violation in the committed list: nothing commits
		// (the UPDATE before it neither), the lock is gone with the
		// discarded connection, and the error is translated.
		tx, ok, err := d.BeginReserved(ctx, []store.Stmt{{SQL: lock, Args: []any{key}}})
		if err != nil || !ok {
			t.Fatalf("BeginReserved ok %v err %v", ok, err)
		}
		err = d.EndReserved(ctx, tx, true,
			[]store.Stmt{{SQL: upd, Args: []any{[]string{"a"}, "y"}}, {SQL: ins, Args: []any{"b"}}},
			[]store.Stmt{{SQL: unlock, Args: []any{key}}})
		if !errors.Is(err, store.ErrUniqueViolation) {
			t.Fatalf("EndReserved of a duplicate INSERT: %v, want ErrUniqueViolation", err)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM rl WHERE v = 'y'`); n != 0 {
			t.Fatal("the statement before the failing one committed")
		}
		other, err := pgx.Connect(ctx, testdb.PostgresURL(t)) // another session
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		// The server frees the lock when the discarded connection's
		// backend notices the closed socket, which may take a moment
		// under load: poll, but never hold one for long.
		var ok2 bool
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := other.QueryRow(ctx, free, key).Scan(&ok2)
			if err == nil && ok2 {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("the advisory lock survived a failed EndReserved (free %v, %v)", ok2, err)
			}
		}
		if traced != (tracer.n.Load() > 0) {
			t.Fatalf("traced %v: the tracer saw %d batches", traced, tracer.n.Load())
		}
	})
}
