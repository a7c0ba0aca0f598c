package idemtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// Backend selects the database idemtest runs on. The zero value is a fresh
// SQLite file under t.TempDir(), migrated: no server needed, only the
// driver linked into the test binary (import _ "modernc.org/sqlite" in one
// of the package's test files; without it the check fails with
// sqlstore.ErrNoSQLiteDriver, which says so). PostgresURL
// runs the same checks on a fresh schema of that server (through pgx's
// database/sql adapter), dropped when the test ends. Open runs them on any
// other store on *sql.Tx: MySQL and MariaDB through
// idemmysqltest.Backend (module github.com/idemkit/idem/store/idemmysql).
type Backend struct {
	// PostgresURL is a postgres:// connection string (for example the
	// value of IDEM_TEST_POSTGRES_URL).
	PostgresURL string
	// Open, when set, opens a fresh, empty store for t (idemtest migrates
	// it) and arranges its cleanup with t.Cleanup. It takes precedence
	// over PostgresURL.
	Open func(ctx context.Context, t testing.TB) (Store, error)
}

// Store is what a backend's store offers: idem's store on *sql.Tx and the
// *sql.DB underneath, which a Setup and the invariants use.
type Store interface {
	store.Driver[*sql.Tx]
	DB() *sql.DB
}

// DB is the database the user's code runs on: the *sql.DB behind idem's
// store and its dialect (store.SQLite, store.Postgres or store.MySQL), so a
// Setup can write the DDL of each.
type DB struct {
	*sql.DB
	Dialect store.Dialect
}

// open opens and migrates the backend's store for t; everything is closed
// or dropped when t ends.
func (b Backend) open(t testing.TB) (Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		d   Store
		err error
	)
	switch {
	case b.Open != nil:
		d, err = b.Open(ctx, t)
	case b.PostgresURL != "":
		d, err = openPostgres(ctx, t, b.PostgresURL)
	default:
		// A short busy timeout: a handler that writes on another
		// connection than the request transaction waits for that
		// transaction's write lock, and must fail fast, not hang.
		d, err = sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "idemtest.db"),
			sqlstore.SQLiteConfig{Synchronous: "NORMAL", BusyTimeout: 2 * time.Second}, sqlstore.Config{})
		if err == nil {
			t.Cleanup(func() { _ = d.Close() })
		}
	}
	if err != nil {
		return nil, err
	}
	if _, err := migrate.New[*sql.Tx](d).Up(ctx); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return d, nil
}

// randomName is a fresh identifier: generated here, never input, so it may
// be spliced into CREATE SCHEMA / CREATE DATABASE.
func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func openPostgres(ctx context.Context, t testing.TB, base string) (Store, error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	schema := randomName("idemtest_")
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("PostgreSQL at the given URL: create schema: %w", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := sql.Open("pgx", base); err == nil {
			_, _ = c.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			_ = c.Close()
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	d, err := sqlstore.OpenPostgres(ctx, base+sep+"search_path="+schema, sqlstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		return nil, err
	}
	d.DB().SetMaxOpenConns(16)
	t.Cleanup(func() { _ = d.Close() })
	return d, nil
}
