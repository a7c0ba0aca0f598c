// Package migrate ships idem's schema as embedded, versioned SQL migrations,
// kept with each dialect (internal/dialect/postgres/migrations, internal/dialect/sqlite/migrations), and applies them.
//
//	d, err := pgxstore.Open(ctx, dbURL, pgxstore.Config{}) // or sqlstore.OpenSQLite, idemmysql.Open
//	if err := migrate.Up(ctx, d); err != nil { … }         // at start-up, before idemhttp.New, outbox.New…
//	st, err := migrate.New(d).Status(ctx)                  // per migration: version, name, applied
//	err = migrate.Check(ctx, d)                            // read-only: errors.Is(err, migrate.ErrNotMigrated)
//
// The command does the same: idem migrate up --db postgres://… (and idem migrate status).
//
// Every idem table is created here, one numbered file per part (0001 inbox,
// 0002 HTTP idempotency keys, 0003 outbox, 0004 effects, 0005 dead letters,
// …); a part that changes its schema later adds a new numbered file, never
// edits a released one. Migrations only ever move up.
//
// Files may use three placeholders: {{t}} is the table qualifier ("schema".
// on PostgreSQL, the prefix on SQLite), {{p}} prefixes index names (empty on
// PostgreSQL, where indexes live in the schema; the prefix on SQLite) and
// {{schema}} is the PostgreSQL schema name.
//
// [Migrator.Up] applies all pending migrations in one transaction, holding
// the dialect's migration lock (sqlset.Meta.MigrateLock: a PostgreSQL
// advisory lock; SQLite: the write lock of BEGIN IMMEDIATE), so
// concurrent starts of several processes are safe: one applies, the others
// wait and then find nothing to do.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem/internal/dialect/postgres"
	"github.com/idemkit/idem/internal/dialect/sqlite"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// FS returns the migration files of dialect d, which live next to that
// dialect's statements (internal/dialect/postgres, internal/dialect/sqlite).
func FS(d store.Dialect) (fs.FS, error) {
	names, _ := store.Names{}.WithDefaults() // the defaults are valid names
	st, err := statements(d, names)
	if err != nil {
		return nil, err
	}
	return st.Meta.Migrations, nil
}

// statements returns the statement set of dialect d for names: the one
// place a new dialect is registered with this package. A Migrator needs
// none of it: it takes everything from its driver's Statements.
func statements(d store.Dialect, names store.Names) (*sqlset.Set, error) {
	switch d {
	case store.Postgres:
		return postgres.Statements(names), nil
	case store.SQLite:
		return sqlite.Statements(names), nil
	}
	return nil, fmt.Errorf("migrate: unknown dialect %q", d)
}

// Migration is one versioned schema change.
type Migration struct {
	Version int    // from the file name's leading number
	Name    string // the rest of the file name, without .sql
	SQL     string // with placeholders expanded
}

var fileRe = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns the migrations of d's dialect, in version order, with
// placeholders expanded for names.
func Migrations(d store.Dialect, names store.Names) ([]Migration, error) {
	st, err := statements(d, names)
	if err != nil {
		return nil, err
	}
	return migrations(st.Meta, string(d)+" ")
}

// migrations reads and expands the migration files of meta; label names
// the dialect in errors.
func migrations(meta sqlset.Meta, label string) ([]Migration, error) {
	fsys := meta.Migrations
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		m := fileRe.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrate: %smigration %s: file name must be NNNN_name.sql", label, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, path.Clean(e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: meta.Expand(string(body))})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrate: two %smigrations with version %04d", label, out[i].Version)
		}
	}
	return out, nil
}

// Status is the state of one migration in a database.
type Status struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when not applied
}

// Migrator applies the embedded migrations through a driver.
type Migrator[TTx any] struct {
	d store.Driver[TTx]
}

// New returns a Migrator for d.
func New[TTx any](d store.Driver[TTx]) *Migrator[TTx] { return &Migrator[TTx]{d: d} }

// Up applies every pending migration in one transaction and returns those it
// applied (none when the database is current). On error nothing is applied.
func (m *Migrator[TTx]) Up(ctx context.Context) ([]Migration, error) {
	return m.UpTo(ctx, 0)
}

// UpTo is Up stopping after migration version (0: no limit), for testing
// an upgrade from an earlier schema.
func (m *Migrator[TTx]) UpTo(ctx context.Context, version int) ([]Migration, error) {
	var applied []Migration
	err := m.inLockedTx(ctx, func(q store.Querier, all []Migration, done map[int]int64) error {
		meta := m.d.Statements().Meta
		now := store.Micros(time.Now())
		for _, mig := range all {
			if _, ok := done[mig.Version]; ok {
				continue
			}
			if version > 0 && mig.Version > version {
				break
			}
			if _, err := q.Exec(ctx, mig.SQL); err != nil {
				return fmt.Errorf("migrate: %04d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := q.Exec(ctx, meta.RecordMigration, mig.Version, mig.Name, now); err != nil {
				return fmt.Errorf("migrate: record %04d: %w", mig.Version, err)
			}
			applied = append(applied, mig)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// Status lists every known migration and whether it is applied. It fails if
// the database has a migration this build does not know (a newer idem ran
// against it).
func (m *Migrator[TTx]) Status(ctx context.Context) ([]Status, error) {
	var out []Status
	err := m.inLockedTx(ctx, func(_ store.Querier, all []Migration, done map[int]int64) error {
		for _, mig := range all {
			at, ok := done[mig.Version]
			out = append(out, Status{Version: mig.Version, Name: mig.Name, Applied: ok, AppliedAt: store.FromMicros(at)})
			delete(done, mig.Version)
		}
		for v := range done {
			return fmt.Errorf("migrate: database has migration %04d, unknown to this build (upgrade idem)", v)
		}
		return nil
	})
	return out, err
}

// Pending reports how many migrations are not applied yet.
func (m *Migrator[TTx]) Pending(ctx context.Context) (int, error) {
	st, err := m.Status(ctx)
	n := 0
	for _, s := range st {
		if !s.Applied {
			n++
		}
	}
	return n, err
}

// inLockedTx runs fn in one transaction holding the migration lock, with
// the migrations table in place, every migration this build knows (all)
// and those the database has applied (done: version → applied at, micros).
func (m *Migrator[TTx]) inLockedTx(ctx context.Context, fn func(q store.Querier, all []Migration, done map[int]int64) error) error {
	all, err := migrations(m.d.Statements().Meta, "")
	if err != nil {
		return err
	}
	return store.InTx(ctx, m.d, func(tx TTx) error {
		q := m.d.Tx(tx)
		if err := m.prepare(ctx, q); err != nil {
			return err
		}
		done, err := m.applied(ctx, q)
		if err != nil {
			return err
		}
		return fn(q, all, done)
	})
}

func (m *Migrator[TTx]) prepare(ctx context.Context, q store.Querier) error {
	meta := m.d.Statements().Meta
	if meta.MigrateLock != "" {
		if _, err := q.Exec(ctx, meta.MigrateLock); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
	}
	if meta.CreateSchema != "" {
		if _, err := q.Exec(ctx, meta.CreateSchema); err != nil {
			return fmt.Errorf("migrate: create schema: %w", err)
		}
	}
	if _, err := q.Exec(ctx, meta.CreateMigrations); err != nil {
		return fmt.Errorf("migrate: create migrations table: %w", err)
	}
	return nil
}

func (m *Migrator[TTx]) applied(ctx context.Context, q store.Querier) (map[int]int64, error) {
	rows, err := q.Query(ctx, m.d.Statements().Meta.AppliedMigrations)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied: %w", err)
	}
	defer rows.Close()
	done := map[int]int64{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			return nil, err
		}
		done[v] = at
	}
	return done, rows.Err()
}

// Up applies pending migrations through d; a shorthand for New(d).Up(ctx).
func Up[TTx any](ctx context.Context, d store.Driver[TTx]) error {
	_, err := New(d).Up(ctx)
	return err
}

// ErrNotMigrated reports a database whose schema lacks migrations this
// build of idem needs: run `idem migrate up` (or [Up]) first.
var ErrNotMigrated = errors.New("migrate: the database schema is not up to date")

// Check reports, reading only (no lock, no table created), whether every
// migration this build knows is applied to d's database. It returns an
// error wrapping [ErrNotMigrated] that names the first missing migration
// and what to run, or the database's own error when it cannot be asked.
// Constructors that are useless on an unmigrated database (idemhttp.New,
// outbox.New) call it, so the mistake is found at start, not as a 503 or a
// relay error per request.
func Check[TTx any](ctx context.Context, d store.Driver[TTx]) error {
	all, err := migrations(d.Statements().Meta, "")
	if err != nil {
		return err
	}
	missing := func(n int, first Migration) error {
		return fmt.Errorf("%w: %d of %d migrations not applied to %s (first: %04d_%s): run `idem migrate up` (or migrate.Up) first",
			ErrNotMigrated, n, len(all), d.Table("migrations"), first.Version, first.Name)
	}
	ok, err := sqlmeta.TableExists(ctx, d, "migrations")
	if err != nil {
		return err
	}
	if !ok {
		return missing(len(all), all[0])
	}
	rows, err := d.Pool().Query(ctx, d.Statements().Meta.AppliedMigrations)
	if err != nil {
		return fmt.Errorf("migrate: read applied: %w", err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			return err
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var lacking []Migration
	for _, m := range all {
		if !done[m.Version] {
			lacking = append(lacking, m)
		}
	}
	if len(lacking) > 0 {
		return missing(len(lacking), lacking[0])
	}
	return nil
}
