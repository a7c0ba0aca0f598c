package versionguard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/dialect/postgres"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/versionguard"
)

func TestDrill11OutOfOrder(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testOutOfOrder(t, e.D) })
}

// Drill 11: versions 7, 9, 8 applied → state 9, one stale reported.
func testOutOfOrder[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE seats (show_id text PRIMARY KEY, seats_left integer NOT NULL, version bigint NOT NULL)`)
	var stale atomic.Int64
	g := versionguard.Guard{Observe: func(_ string, r versionguard.Result) {
		if r.Stale {
			stale.Add(1)
		}
	}}
	for _, v := range []int64{7, 9, 8} {
		err := store.InTx(ctx, d, func(tx TTx) error {
			r, err := g.Apply(ctx, d.Tx(tx), d.Statements(), versionguard.Spec{
				Table: "seats", KeyColumns: []string{"show_id"}, KeyValues: []any{"show-1"},
				Set: map[string]any{"seats_left": 100 - v}, Upsert: true,
			}, v)
			if err != nil {
				return err
			}
			if want := v != 8; r.Applied != want || r.Stale == want {
				t.Errorf("version %d: %+v", v, r)
			}
			if v == 8 && r.Current != 9 {
				t.Errorf("version 8: current = %d, want 9", r.Current)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var seats, version int64
	if err := d.Pool().QueryRow(ctx, `SELECT seats_left, version FROM seats WHERE show_id = $1`, "show-1").Scan(&seats, &version); err != nil {
		t.Fatal(err)
	}
	if version != 9 || seats != 91 || stale.Load() != 1 {
		t.Fatalf("state = (seats %d, version %d), stale = %d; want (91, 9), 1", seats, version, stale.Load())
	}

	// Update mode: a missing row is reported, not created; redelivery is stale.
	up := versionguard.Spec{Table: "seats", KeyColumns: []string{"show_id"}, KeyValues: []any{"show-2"},
		Set: map[string]any{"seats_left": 1}}
	r, err := versionguard.Apply(ctx, d.Pool(), d.Statements(), up, 3)
	if err != nil || !r.Missing {
		t.Fatalf("update of a missing row = %+v, %v", r, err)
	}
	up.KeyValues = []any{"show-1"}
	if r, err := versionguard.Apply(ctx, d.Pool(), d.Statements(), up, 10); err != nil || !r.Applied {
		t.Fatalf("update v10 = %+v, %v", r, err)
	}
	if r, err := versionguard.Apply(ctx, d.Pool(), d.Statements(), up, 10); err != nil || !r.Stale || r.Current != 10 {
		t.Fatalf("redelivered v10 = %+v, %v", r, err)
	}
}

func TestConcurrentShuffled(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testConcurrent(t, e.D) })
}

// Versions 1..n applied concurrently in random order leave n; applied +
// stale = n and the final state is the highest version's.
func testConcurrent[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE proj (tenant text NOT NULL, id text NOT NULL, val text NOT NULL, v bigint NOT NULL, PRIMARY KEY (tenant, id))`)
	const n = 40
	versions := rand.Perm(n)
	var applied, stale atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, p := range versions {
		v := int64(p + 1)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := store.InTx(ctx, d, func(tx TTx) error {
				r, err := versionguard.ApplyTx(ctx, d, tx, versionguard.Spec{Table: "proj", KeyColumns: []string{"tenant", "id"},
					KeyValues: []any{"t", "x"}, VersionColumn: "v", Set: map[string]any{"val": strconv.FormatInt(v, 10)}, Upsert: true}, v)
				if err == nil {
					if r.Applied {
						applied.Add(1)
					} else {
						stale.Add(1)
					}
				}
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var val string
	var v int64
	if err := d.Pool().QueryRow(ctx, `SELECT val, v FROM proj`).Scan(&val, &v); err != nil {
		t.Fatal(err)
	}
	if v != n || val != "40" || applied.Load()+stale.Load() != n {
		t.Fatalf("final (%s, %d), applied %d + stale %d", val, v, applied.Load(), stale.Load())
	}
}

func TestInvalidIdentifiers(t *testing.T) {
	t.Parallel()
	stmts := postgres.Statements(store.Names{Schema: "idem", Prefix: "idem_"})
	for _, s := range []versionguard.Spec{
		{Table: `seats"; DROP TABLE x; --`, KeyColumns: []string{"id"}, KeyValues: []any{1}},
		{Table: "seats", KeyColumns: []string{"id"}, KeyValues: []any{1}, Set: map[string]any{"a b": 1}},
		{Table: "seats", KeyColumns: []string{"id", "x"}, KeyValues: []any{1}},
		{Table: "a.b.c", KeyColumns: []string{"id"}, KeyValues: []any{1}},
	} {
		if _, err := versionguard.Apply(context.Background(), nil, stmts, s, 1); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%+v: err = %v, want ErrInvalidOption", s, err)
		}
	}
}

// afterFirstWrite is a Querier that runs hook once, right after the first
// Exec returned: another transaction's commit landing between the guarded
// write and its read-back.
type afterFirstWrite struct {
	store.Querier
	once sync.Once
	hook func()
}

func (q *afterFirstWrite) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	n, err := q.Querier.Exec(ctx, sql, args...)
	q.once.Do(q.hook)
	return n, err
}

// An update whose row is created by another transaction between the write
// (which found no row) and the read-back is applied, not reported stale
// against the older version it read. Before, it returned Stale with
// Current 1 for version 8: a projection consumer acked the event and
// version 8 was never applied. PostgreSQL only: each statement of a READ
// COMMITTED transaction sees the latest commits there, and SQLite's writer
// would hold the other transaction off.
func TestRowCreatedBetweenWriteAndRead(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) store.Driver[any]{
		"pgx":          func(t *testing.T) store.Driver[any] { return testdb.Erase(testdb.Pgx(t)) },
		"sql-postgres": func(t *testing.T) store.Driver[any] { return testdb.Erase(testdb.SQLPostgres(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			ctx := context.Background()
			testdb.Exec(t, d, `CREATE TABLE seats (show_id text PRIMARY KEY, seats_left integer NOT NULL, version bigint NOT NULL)`)
			spec := versionguard.Spec{Table: "seats", KeyColumns: []string{"show_id"}, KeyValues: []any{"show-1"},
				Set: map[string]any{"seats_left": 42}}
			var r versionguard.Result
			err := store.InTx(ctx, d, func(tx any) error {
				q := &afterFirstWrite{Querier: d.Tx(tx), hook: func() {
					testdb.Exec(t, d, `INSERT INTO seats (show_id, seats_left, version) VALUES ('show-1', 100, 1)`)
				}}
				var err error
				r, err = versionguard.Apply(ctx, q, d.Statements(), spec, 8)
				return err
			})
			if err != nil || !r.Applied {
				t.Fatalf("Apply = %+v, %v; want applied", r, err)
			}
			var seats, version int64
			if err := d.Pool().QueryRow(ctx, `SELECT seats_left, version FROM seats WHERE show_id = 'show-1'`).Scan(&seats, &version); err != nil {
				t.Fatal(err)
			}
			if seats != 42 || version != 8 {
				t.Fatalf("row = (seats %d, version %d), want (42, 8)", seats, version)
			}
		})
	}
}
