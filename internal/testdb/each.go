package testdb

import (
	"testing"

	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/store"
)

// Driver names one of the drivers [EachDriver] runs a test on.
type Driver struct {
	// Name is the subtest's name: "sqlite", "pgx", "sql-postgres" or
	// "pgx-partitioned". (MySQL lives in its own module, whose tests run
	// the store conformance suite and idemtest's checks on it.)
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
// server subtests skip with a message when it is not). Each subtest gets
// its own freshly migrated store.
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
	if partitionedRequested() && !bare {
		run("pgx-partitioned", func(t *testing.T) (store.Driver[any], any) {
			d := PgxPartitioned(t)
			return Erase(d), d
		})
	}
}

// Erase is driverkit.Erase: a Driver[TTx] as a Driver[any], forwarding every
// method and ability.
func Erase[TTx any](d store.Driver[TTx]) store.Driver[any] { return driverkit.Erase(d) }
