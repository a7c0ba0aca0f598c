package idemtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/mysql"
	"github.com/idemkit/idem/store/sqlstore"
)

// Backend selects the database idemtest runs on. The zero value is a fresh
// SQLite file under t.TempDir(), migrated: no server needed. A URL runs the
// same checks on a fresh schema (PostgreSQL, through pgx's database/sql
// adapter) or a fresh database (MySQL/MariaDB) of that server, dropped when
// the test ends.
type Backend struct {
	// PostgresURL is a postgres:// connection string (for example the
	// value of IDEM_TEST_POSTGRES_URL).
	PostgresURL string
	// MySQLURL is a mysql://user@host:3306/db URL (for example the value
	// of IDEM_TEST_MYSQL_URL). Ignored when PostgresURL is set.
	MySQLURL string
}

// DB is the database the user's code runs on: the *sql.DB behind idem's
// store and its dialect (store.SQLite, store.Postgres or "mysql"), so a
// Setup can write the DDL of each.
type DB struct {
	*sql.DB
	Dialect store.Dialect
}

// sqlDriver is what every backend's driver offers: idem's store on *sql.Tx
// and the *sql.DB underneath.
type sqlDriver interface {
	store.Driver[*sql.Tx]
	DB() *sql.DB
}

// open opens and migrates the backend's store for t; everything is closed
// or dropped when t ends.
func (b Backend) open(t testing.TB) (sqlDriver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		d   sqlDriver
		err error
	)
	switch {
	case b.PostgresURL != "":
		d, err = openPostgres(ctx, t, b.PostgresURL)
	case b.MySQLURL != "":
		d, err = openMySQL(ctx, t, b.MySQLURL)
	default:
		// A short busy timeout: a handler that writes on another
		// connection than the request transaction waits for that
		// transaction's write lock, and must fail fast, not hang.
		d, err = sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "idemtest.db"),
			sqlstore.SQLiteOptions{Synchronous: "NORMAL", BusyTimeout: 2 * time.Second}, sqlstore.Config{})
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

func openPostgres(ctx context.Context, t testing.TB, base string) (sqlDriver, error) {
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

func openMySQL(ctx context.Context, t testing.TB, base string) (sqlDriver, error) {
	dsn, err := mysql.ServerDSN(base)
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	name := randomName("idemtest_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		return nil, fmt.Errorf("MySQL at the given URL: create database: %w", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := sql.Open("mysql", dsn); err == nil {
			_, _ = c.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
			_ = c.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	d, err := mysql.Open(ctx, u.String(), mysql.Config{})
	if err != nil {
		return nil, err
	}
	d.DB().SetMaxOpenConns(32)
	t.Cleanup(func() { _ = d.Close() })
	return d, nil
}
