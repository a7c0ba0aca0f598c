// Package testdb gives tests isolated, migrated idem stores: a fresh
// PostgreSQL schema per test (when IDEM_TEST_POSTGRES_URL is set) or a fresh
// SQLite file. Business tables a test creates without a schema land in the
// same isolated schema (search_path) or file.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
)

// EnvPostgres names the variable holding the PostgreSQL URL for tests.
const EnvPostgres = "IDEM_TEST_POSTGRES_URL"

// PostgresURL returns the test server's URL, or skips t with a message when
// the variable is unset.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvPostgres)
	if u == "" {
		t.Skipf("%s is not set: skipping the PostgreSQL variant (set it to run against a real server)", EnvPostgres)
	}
	return u
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresDatabase creates a fresh database on the test server, dropped
// (with FORCE) when t ends, and returns its URL: for code under test that
// owns a whole database (migrations into the default schema, commands
// given a --db URL). It skips t when the variable is unset and fails it
// when the server is unreachable.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	base := PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := randomName("t_db_") // generated here, never input
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testdb: %s is set but PostgreSQL is unreachable: %v", EnvPostgres, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("testdb: drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testdb: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: %s: %v", EnvPostgres, err)
	}
	u.Path = "/" + name
	return u.String()
}

// PostgresSchema creates a fresh schema on the test server, dropped when t
// ends, and returns a connection string whose search_path points at it.
// It fails t (not skips) when the variable is set but the server is down.
func PostgresSchema(t testing.TB) (connString, schema string) {
	t.Helper()
	base := PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema = randomName("t_")
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testdb: %s is set but PostgreSQL is unreachable: %v", EnvPostgres, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("testdb: drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Logf("testdb: drop schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if containsQuery(base) {
		sep = "&"
	}
	return base + sep + "search_path=" + schema, schema
}

func containsQuery(u string) bool {
	for i := 0; i < len(u); i++ {
		if u[i] == '?' {
			return true
		}
	}
	return false
}

// PgxPool returns a pool on a fresh schema, closed when t ends.
func PgxPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	conn, schema := PostgresSchema(t)
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	if cfg.MaxConns < 16 {
		cfg.MaxConns = 16
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { closePool(t, pool) })
	return pool, schema
}

// closeWait bounds how long closing a test's pool waits for its
// connections to come back.
const closeWait = 10 * time.Second

// closePool closes pool, but does not wait forever: pgxpool.Close blocks
// until every acquired connection is released, so a test that failed (or
// leaked) with a transaction open would otherwise hang its package until
// the test binary's timeout, hiding the failure's message.
func closePool(t testing.TB, pool *pgxpool.Pool) {
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		t.Logf("testdb: the pool still had %d connections acquired %v after the test (a transaction or listener left open?); not waiting for them",
			pool.Stat().AcquiredConns(), closeWait)
	}
}

// Pgx returns a migrated pgx driver whose idem tables and search_path live
// in a fresh schema.
func Pgx(t testing.TB) *pgxstore.Driver {
	t.Helper()
	d := PgxBare(t)
	MustMigrate(t, d)
	return d
}

// PgxBare is Pgx without the migrations.
func PgxBare(t testing.TB) *pgxstore.Driver {
	t.Helper()
	pool, schema := PgxPool(t)
	d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// SQLPostgres returns a migrated database/sql driver on PostgreSQL (pgx
// stdlib) in a fresh schema.
func SQLPostgres(t testing.TB) *sqlstore.Driver {
	t.Helper()
	d := SQLPostgresBare(t)
	MustMigrate(t, d)
	return d
}

// SQLPostgresBare is SQLPostgres without the migrations.
func SQLPostgresBare(t testing.TB) *sqlstore.Driver {
	t.Helper()
	conn, schema := PostgresSchema(t)
	d, err := sqlstore.OpenPostgres(context.Background(), conn, sqlstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	d.DB().SetMaxOpenConns(16)
	t.Cleanup(func() { d.Close() })
	return d
}

// SQLitePath returns a fresh database file path under t.TempDir().
func SQLitePath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "idem.db")
}

// SQLite returns a migrated SQLite driver on a fresh file.
func SQLite(t testing.TB) *sqlstore.Driver {
	t.Helper()
	d := SQLiteBare(t)
	MustMigrate(t, d)
	return d
}

// SQLiteLinked reports whether the test binary links a "sqlite"
// database/sql driver. The core module depends on none (a service on pgx
// must not carry one), so its tests run on SQLite only when one is linked:
// in the workspace, `go test -overlay "$(.ci/sqlite-overlay)" ./...` adds
// modernc.org/sqlite to store/sqlstore for the run, as .ci/run does.
func SQLiteLinked() bool { return slices.Contains(sql.Drivers(), "sqlite") }

// SkipWithoutSQLite skips t, with the command that runs it, when no SQLite
// driver is linked.
func SkipWithoutSQLite(t testing.TB) {
	t.Helper()
	if !SQLiteLinked() {
		t.Skip(NoSQLiteMessage)
	}
}

// NoSQLiteMessage says why a SQLite case did not run and how to run it.
const NoSQLiteMessage = `no SQLite driver linked (the core module depends on none); run the SQLite cases with go test -overlay "$(.ci/sqlite-overlay)" ./... from the repository root`

// SQLiteBare is SQLite without the migrations.
func SQLiteBare(t testing.TB) *sqlstore.Driver {
	t.Helper()
	SkipWithoutSQLite(t)
	d, err := sqlstore.OpenSQLite(SQLitePath(t), sqlstore.SQLiteConfig{Synchronous: "NORMAL"}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// MustMigrate applies idem's migrations or fails t.
func MustMigrate[TTx any](t testing.TB, d store.Driver[TTx]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, d); err != nil {
		t.Fatalf("testdb: migrate: %v", err)
	}
}

// Exec runs a statement outside any transaction or fails t. A test's DDL
// is adapted to the driver's dialect first (see [Portable]).
func Exec[TTx any](t testing.TB, d store.Driver[TTx], sql string, args ...any) {
	t.Helper()
	if _, err := d.Pool().Exec(context.Background(), Portable(d.Dialect(), sql), args...); err != nil {
		t.Fatalf("testdb: %s: %v", sql, err)
	}
}

// Count returns the result of a SELECT count(*) query or fails t.
func Count[TTx any](t testing.TB, d store.Driver[TTx], sql string, args ...any) int {
	t.Helper()
	var n int64
	if err := d.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("testdb: %s: %v", sql, err)
	}
	return int(n)
}

// Main runs a package's tests (call it from TestMain). Without a linked
// SQLite driver it skips the package's Examples, which run on SQLite and
// cannot skip themselves, and says so; the tests skip one by one.
func Main(m *testing.M) {
	if !SQLiteLinked() {
		flag.Parse()
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, "testdb:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "skipping the Examples:", NoSQLiteMessage)
	}
	os.Exit(m.Run())
}
