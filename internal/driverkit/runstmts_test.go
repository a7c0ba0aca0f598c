package driverkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// RunStmts, the SendBatch of a driver that does not pipeline, on every
// driver's Querier: in order, Affected and Rows per statement, stops at the
// first error and names the statement, keeping the translated error.
func TestRunStmts(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		q := e.D.Pool()
		testdb.Exec(t, e.D, `CREATE TABLE rs (k text PRIMARY KEY, v bigint NOT NULL)`)
		if err := driverkit.RunStmts(ctx, q, nil); err != nil {
			t.Fatal(err)
		}
		var ins, upd int64 = -1, -1
		var got []int64
		err := driverkit.RunStmts(ctx, q, []store.Stmt{
			{SQL: `INSERT INTO rs (k, v) VALUES ('a', 1), ('b', 2)`, Affected: &ins},
			{SQL: `UPDATE rs SET v = v * 10 WHERE k = $1`, Args: []any{"b"}, Affected: &upd},
			{SQL: `SELECT v FROM rs ORDER BY k`, Rows: func(r store.Rows) error {
				for r.Next() {
					var v int64
					if err := r.Scan(&v); err != nil {
						return err
					}
					got = append(got, v)
				}
				return nil
			}},
		})
		if err != nil || ins != 2 || upd != 1 || len(got) != 2 || got[0] != 1 || got[1] != 20 {
			t.Fatalf("RunStmts: %v; affected %d %d; rows %v", err, ins, upd, got)
		}

		later := int64(-1)
		err = driverkit.RunStmts(ctx, q, []store.Stmt{
			{SQL: `INSERT INTO rs (k, v) VALUES ('c', 3)`},
			{SQL: `INSERT INTO rs (k, v) VALUES ('a', 3)`},
			{SQL: `INSERT INTO rs (k, v) VALUES ('d', 4)`, Affected: &later},
		})
		if !errors.Is(err, store.ErrUniqueViolation) || !strings.Contains(err.Error(), "statement 2 of batch") {
			t.Fatalf("duplicate: %v, want ErrUniqueViolation naming statement 2", err)
		}
		if later != -1 || testdb.Count(t, e.D, `SELECT count(*) FROM rs WHERE k = 'd'`) != 0 {
			t.Fatal("RunStmts went on after the error")
		}
		if testdb.Count(t, e.D, `SELECT count(*) FROM rs WHERE k = 'c'`) != 1 {
			t.Fatal("on the pool, the statement before the error stays committed")
		}

		boom := errors.New("boom")
		ran := false
		err = driverkit.RunStmts(ctx, q, []store.Stmt{
			{SQL: `SELECT v FROM rs`, Rows: func(store.Rows) error { return boom }},
			{SQL: `SELECT v FROM rs`, Rows: func(store.Rows) error { ran = true; return nil }},
		})
		if !errors.Is(err, boom) || ran || !strings.Contains(err.Error(), "statement 1 of batch") {
			t.Fatalf("Rows error: %v (later ran %v)", err, ran)
		}
		err = driverkit.RunStmts(ctx, q, []store.Stmt{{SQL: `SELECT nope FROM rs`, Rows: func(store.Rows) error { return nil }}})
		if err == nil || !strings.Contains(err.Error(), "statement 1 of batch") {
			t.Fatalf("a query that fails: %v", err)
		}
	})
}
