package testdb

import (
	"context"
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlset"
)

// Driver names one of the drivers [EachDriver] runs a test on.
type Driver struct {
	// Name is the subtest's name: "sqlite", "pgx" or "sql-postgres".
	Name string
	// D is the migrated, isolated store, its transaction type erased so
	// one test body serves every driver (the feature code under test is
	// the same generic code for every TTx).
	D store.Driver[any]
	// Native is the concrete driver (*sqlstore.Driver or
	// *pgxstore.Driver), for a test that needs it.
	Native any
}

// Option changes which drivers EachDriver runs.
type Option int

const (
	// Serial runs the drivers one after another instead of in parallel
	// (for tests that measure time or hold many connections).
	Serial Option = iota + 1
	// NoSQLPostgres leaves out database/sql on PostgreSQL (for behaviour
	// only the pgx driver has).
	NoSQLPostgres
	// Unmigrated hands the body empty stores, for migration tests.
	Unmigrated
)

// EachDriver runs body once per driver, as subtests: SQLite always, pgx and
// database/sql on PostgreSQL when IDEM_TEST_POSTGRES_URL is set (the
// PostgreSQL subtests skip with a message when it is not). Each subtest
// gets its own freshly migrated store.
func EachDriver(t *testing.T, body func(t *testing.T, d Driver), opts ...Option) {
	t.Helper()
	serial, withSQLPG, bare := false, true, false
	for _, o := range opts {
		switch o {
		case Serial:
			serial = true
		case NoSQLPostgres:
			withSQLPG = false
		case Unmigrated:
			bare = true
		}
	}
	run := func(name string, open func(t *testing.T) (store.Driver[any], any)) {
		t.Run(name, func(t *testing.T) {
			if !serial {
				t.Parallel()
			}
			d, native := open(t)
			body(t, Driver{Name: name, D: d, Native: native})
		})
	}
	run("sqlite", func(t *testing.T) (store.Driver[any], any) {
		d := SQLiteBare(t)
		if !bare {
			MustMigrate(t, d)
		}
		return Erase(d), d
	})
	run("pgx", func(t *testing.T) (store.Driver[any], any) {
		d := PgxBare(t)
		if !bare {
			MustMigrate(t, d)
		}
		return Erase(d), d
	})
	if withSQLPG {
		run("sql-postgres", func(t *testing.T) (store.Driver[any], any) {
			d := SQLPostgresBare(t)
			if !bare {
				MustMigrate(t, d)
			}
			return Erase(d), d
		})
	}
}

// Erase turns a Driver[TTx] into a Driver[any], forwarding every method and
// ability.
func Erase[TTx any](d store.Driver[TTx]) store.Driver[any] { return erased[TTx]{d} }

type erased[TTx any] struct{ d store.Driver[TTx] }

func (a erased[TTx]) Dialect() store.Dialect      { return a.d.Dialect() }
func (a erased[TTx]) Table(n string) string       { return a.d.Table(n) }
func (a erased[TTx]) Names() store.Names          { return a.d.Names() }
func (a erased[TTx]) Tx(tx any) store.Querier     { return a.d.Tx(tx.(TTx)) }
func (a erased[TTx]) Pool() store.Querier         { return a.d.Pool() }
func (a erased[TTx]) Close() error                { return a.d.Close() }
func (a erased[TTx]) Statements() *sqlset.Set     { return a.d.Statements() }
func (a erased[TTx]) SupportsPipeline() bool      { return a.d.SupportsPipeline() }
func (a erased[TTx]) SupportsListener() bool      { return a.d.SupportsListener() }
func (a erased[TTx]) SupportsAdvisoryLocks() bool { return a.d.SupportsAdvisoryLocks() }
func (a erased[TTx]) Begin(ctx context.Context) (any, error) {
	tx, err := a.d.Begin(ctx)
	return tx, err
}
func (a erased[TTx]) Commit(ctx context.Context, tx any) error {
	return a.d.Commit(ctx, tx.(TTx))
}
func (a erased[TTx]) Rollback(ctx context.Context, tx any) error {
	return a.d.Rollback(ctx, tx.(TTx))
}
func (a erased[TTx]) BeginInsert(ctx context.Context, sql string, args ...any) (any, bool, bool, error) {
	return a.d.BeginInsert(ctx, sql, args...)
}
func (a erased[TTx]) ExecCommit(ctx context.Context, tx any, sql string, args ...any) (bool, error) {
	return a.d.ExecCommit(ctx, tx.(TTx), sql, args...)
}
func (a erased[TTx]) SendBatch(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	return a.d.SendBatch(ctx, q, stmts)
}
func (a erased[TTx]) Listen(ctx context.Context, channel string) (store.Listener, error) {
	return a.d.Listen(ctx, channel)
}
