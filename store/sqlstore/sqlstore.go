// Package sqlstore is idem's database/sql driver: handlers receive the
// caller's *sql.Tx. It serves SQLite through modernc.org/sqlite (pure Go, the
// embedded default) and PostgreSQL through github.com/jackc/pgx/v5/stdlib.
// This module does not depend on the SQLite driver, so a service on pgx
// does not carry it: a program that opens SQLite links it with one import,
//
//	import _ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
//
//	d, err := sqlstore.OpenSQLite("./idem-data/idem.db", sqlstore.SQLiteConfig{}, sqlstore.Config{})
//	if err := migrate.Up(ctx, d); err != nil { … }
//	mw, err := idemhttp.New(d, idemhttp.Config{Tenant: tenantOf})
//	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		tx, _ := idemhttp.SQLTx(r.Context()) // *sql.Tx: the key's transaction, never commit it
//		_, err := tx.ExecContext(r.Context(), `INSERT INTO orders (id) VALUES ($1)`, newID())
//		…
//	})))
//	// PostgreSQL on database/sql: sqlstore.OpenPostgres(ctx, url, sqlstore.Config{});
//	// a *sql.DB of your own: sqlstore.New(db, sqlstore.Config{}), opened with sqliteDSN on SQLite
//
// SQLite write transactions must start with BEGIN IMMEDIATE: a deferred
// transaction that later upgrades to a writer fails with SQLITE_BUSY at once
// instead of waiting. [OpenSQLite] opens a database configured for that
// (_txlock=immediate), in WAL mode with a busy timeout; a *sql.DB opened
// another way must set the same options.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/idemkit/idem/internal/dialect/postgres"
	sqlitesql "github.com/idemkit/idem/internal/dialect/sqlite"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// SQL is what a dialect package hands this driver for a database it does
// not know itself: the dialect's statements and the translation of its
// driver's errors onto store's sentinels (store.ErrNoRows is translated
// by sqlstore before Translate is called). With it, a new dialect is a
// package of its own and sqlstore is not edited.
type SQL interface {
	// Statements returns the dialect's statements for names.
	Statements(names store.Names) *sqlset.Set
	// Translate maps the database's errors onto store's sentinels,
	// keeping the original error in the chain; others pass unchanged.
	Translate(err error) error
}

// Config configures a Driver.
type Config struct {
	// Dialect of the database behind the *sql.DB. Defaults to store.SQLite.
	// A dialect other than store.SQLite and store.Postgres needs SQL.
	Dialect store.Dialect
	// SQL supplies the statements and error translation of a dialect
	// defined outside this package (its name is Dialect).
	SQL SQL
	// Names sets the schema (PostgreSQL) or table prefix (SQLite). Defaults
	// to schema "idem" / prefix "idem_".
	Names store.Names
}

// Driver implements store.Driver[*sql.Tx]. It is safe for concurrent use.
// Its documented methods are the handle a service uses (DB, Close,
// Dialect, Names); the transactional methods idem's packages call (Begin,
// Tx, BeginReserved, SendBatch, …) come from an embedded implementation:
// they are not application API and not covered by semver (run your own
// transactions with store.InTx or on DB).
type Driver struct{ *driver }

// driver is Driver's implementation of store.Driver.
type driver struct {
	db      *sql.DB
	dialect store.Dialect
	stmts   *sqlset.Set
	tr      func(error) error
	names   store.Names
	owned   bool
	// prepared are statements run on every request of the HTTP key path
	// on SQLite, prepared once (see prepared.go).
	prepared *preparedSet
}

var _ store.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a driver over the caller's *sql.DB. Close does not close it.
func New(db *sql.DB, cfg Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("sqlstore: nil *sql.DB")
	}
	if cfg.Dialect == "" {
		cfg.Dialect = store.SQLite
	}
	names, err := cfg.Names.WithDefaults()
	if err != nil {
		return nil, err
	}
	d := &Driver{&driver{db: db, dialect: cfg.Dialect, names: names, tr: translate}}
	switch {
	case cfg.SQL != nil:
		d.stmts = cfg.SQL.Statements(names)
		d.tr = func(err error) error {
			if err == nil || errors.Is(err, sql.ErrNoRows) {
				return translate(err)
			}
			return cfg.SQL.Translate(err)
		}
	case cfg.Dialect == store.Postgres:
		d.stmts = postgres.Statements(names)
	case cfg.Dialect == store.SQLite:
		d.stmts = sqlitesql.Statements(names)
	default:
		return nil, fmt.Errorf("sqlstore: unknown dialect %q (a dialect of its own package comes with Config.SQL)", cfg.Dialect)
	}
	if d.dialect == store.SQLite {
		d.prepared = newPreparedSet(db, d.stmts.HTTPKeys.Load, d.stmts.HTTPKeys.InsertCompleted)
	}
	return d, nil
}

// SQLiteConfig configures the SQLite connection OpenSQLite opens.
type SQLiteConfig struct {
	// BusyTimeout bounds how long a writer waits for the write lock.
	// Defaults to 30s.
	BusyTimeout time.Duration
	// Synchronous is the PRAGMA synchronous level. Defaults to "FULL", which
	// survives power loss; "NORMAL" survives process crashes only.
	Synchronous string
	// MaxOpenConns caps the pool. Defaults to 8.
	MaxOpenConns int
	// MustExist makes OpenSQLite open an existing database only: it creates
	// neither the file nor its directory, and a missing file is an error
	// wrapping fs.ErrNotExist. Read-only tools set it
	// so that a mistyped path is reported instead of answered from a new,
	// empty database. The database is still opened read-write (WAL mode
	// needs its -wal and -shm files), so a caller that only reads must
	// itself not write. Defaults to false: create what is missing.
	MustExist bool
}

// ErrNoSQLiteDriver reports that no "sqlite" database/sql driver is linked
// into the program: this module does not import one. Link modernc.org/sqlite
// with
//
//	import _ "modernc.org/sqlite"
var ErrNoSQLiteDriver = errors.New(`sqlstore: no SQLite driver is linked into this program; add import _ "modernc.org/sqlite"`)

// sqliteLinked reports whether a "sqlite" database/sql driver is linked
// into the program, which [OpenSQLite] needs.
func sqliteLinked() bool { return slices.Contains(sql.Drivers(), "sqlite") }

// The SQLite result codes translate maps (sqlite3.h's extended codes), read
// through the Code method modernc.org/sqlite's *Error has, so this package
// needs no import of the driver.
const (
	sqliteBusy                 = 5
	sqliteLocked               = 6
	sqliteBusySnapshot         = 517
	sqliteBusyTimeout          = 773
	sqliteConstraintPrimaryKey = 1555
	sqliteConstraintUnique     = 2067
)

// sqliteError is the method modernc.org/sqlite's *Error offers.
type sqliteError interface {
	error
	Code() int
}

// sqliteDSN returns the modernc.org/sqlite DSN idem uses for path: WAL mode,
// BEGIN IMMEDIATE transactions, a busy timeout and foreign keys on. With
// opt.MustExist it also carries SQLite's mode=rw, so opening it never
// creates the file.
func sqliteDSN(path string, opt SQLiteConfig) string {
	if opt.BusyTimeout <= 0 {
		opt.BusyTimeout = 30 * time.Second
	}
	if opt.Synchronous == "" {
		opt.Synchronous = "FULL"
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opt.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+opt.Synchronous+")")
	q.Add("_pragma", "foreign_keys(1)")
	if opt.MustExist {
		q.Set("mode", "rw") // SQLite's own: open read-write, never create
	}
	return "file:" + uriPath(path) + "?" + q.Encode()
}

// uriPath escapes the characters that would end or change the path part of
// an SQLite URI filename ("%", "?", "#").
func uriPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// OpenSQLite opens the SQLite database file at path and returns a driver
// that owns it. Unless opt.MustExist is set, a missing file is created with
// mode 0600 (its -wal and -shm files get the same mode from SQLite) and
// missing directories with mode 0700, so the stored requests, responses
// and payloads are readable by their owner only; the process umask can
// only remove bits from these. The modes of existing files and
// directories are left as they are.
func OpenSQLite(path string, opt SQLiteConfig, cfg Config) (*Driver, error) {
	if path == "" {
		return nil, errors.New("sqlstore: empty SQLite path")
	}
	created := false
	if opt.MustExist {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("sqlstore: no database at %s: %w", path, fs.ErrNotExist)
		} else if err != nil {
			return nil, fmt.Errorf("sqlstore: %w", err)
		}
	} else {
		var err error
		if created, err = createPrivate(path); err != nil {
			return nil, fmt.Errorf("sqlstore: %w", err)
		}
	}
	d, err := openSQLite(path, opt, cfg)
	if err != nil && created { // leave nothing behind
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			_ = os.Remove(p)
		}
	}
	return d, err
}

func openSQLite(path string, opt SQLiteConfig, cfg Config) (*Driver, error) {
	if !sqliteLinked() {
		return nil, ErrNoSQLiteDriver
	}
	db, err := sql.Open("sqlite", sqliteDSN(path, opt))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	if opt.MaxOpenConns <= 0 {
		opt.MaxOpenConns = 8
	}
	db.SetMaxOpenConns(opt.MaxOpenConns)
	db.SetMaxIdleConns(opt.MaxOpenConns)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: open %s: %w", path, err)
	}
	cfg.Dialect = store.SQLite
	d, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// createPrivate creates path's missing directories (0700) and, when it
// does not exist yet, the empty file itself (0600), before SQLite opens it:
// SQLite would create it with 0644 and give its -wal and -shm files the
// same mode. It reports whether it created the file.
func createPrivate(path string) (bool, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, f.Close()
}

// OpenPostgres opens connString through pgx's database/sql adapter and
// returns a driver that owns the *sql.DB.
func OpenPostgres(ctx context.Context, connString string, cfg Config) (*Driver, error) {
	db, err := sql.Open("pgx", connString)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: connect: %w", err)
	}
	cfg.Dialect = store.Postgres
	d, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// DB returns the underlying *sql.DB.
func (d *Driver) DB() *sql.DB { return d.db }

// Dialect returns the configured dialect.
func (d *Driver) Dialect() store.Dialect { return d.dialect }

// Names returns the configured names.
func (d *Driver) Names() store.Names { return d.names }

// Table returns the qualified table name.
func (d *driver) Table(name string) string { return d.names.Table(d.dialect, name) }

// Begin starts a transaction (BEGIN IMMEDIATE on a database opened with
// OpenSQLite).
func (d *driver) Begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	return tx, d.tr(err)
}

// Commit commits tx.
func (d *driver) Commit(_ context.Context, tx *sql.Tx) error { return d.tr(tx.Commit()) }

// Rollback rolls tx back; a finished transaction is not an error.
func (d *driver) Rollback(_ context.Context, tx *sql.Tx) error {
	err := tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return d.tr(err)
}

// Tx wraps tx as a store.Querier.
func (d *driver) Tx(tx *sql.Tx) store.Querier { return querier{tx, d.tr, d.prepared, tx} }

// Pool returns a store.Querier on the *sql.DB.
func (d *driver) Pool() store.Querier { return querier{d.db, d.tr, d.prepared, nil} }

// Close closes the *sql.DB if this package opened it.
func (d *Driver) Close() error {
	d.prepared.close()
	if d.owned {
		return d.db.Close()
	}
	return nil
}

type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type querier struct {
	c  conn
	tr func(error) error
	// p and tx: a statement of p runs prepared, on tx when not nil.
	p  *preparedSet
	tx *sql.Tx
}

// on returns the connection that runs query: its prepared statement when
// it has one, else q.c.
func (q querier) on(ctx context.Context, query string) conn {
	if st := q.p.get(ctx, query, q.tx == nil); st != nil {
		if q.tx != nil {
			return preparedConn{q.tx.StmtContext(ctx, st)}
		}
		return preparedConn{st}
	}
	return q.c
}

func (q querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.on(ctx, query).ExecContext(ctx, query, args...)
	if err != nil {
		return 0, q.tr(err)
	}
	n, err := res.RowsAffected()
	return n, q.tr(err)
}

func (q querier) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	rows, err := q.on(ctx, query).QueryContext(ctx, query, args...)
	if err != nil {
		return nil, q.tr(err)
	}
	return sqlRows{rows, q.tr}, nil
}

func (q querier) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return sqlRow{q.on(ctx, query).QueryRowContext(ctx, query, args...), q.tr}
}

type sqlRows struct {
	r  *sql.Rows
	tr func(error) error
}

func (r sqlRows) Next() bool             { return r.r.Next() }
func (r sqlRows) Scan(dest ...any) error { return r.tr(r.r.Scan(dest...)) }
func (r sqlRows) Err() error             { return r.tr(r.r.Err()) }
func (r sqlRows) Close()                 { _ = r.r.Close() }

type sqlRow struct {
	r  *sql.Row
	tr func(error) error
}

func (r sqlRow) Scan(dest ...any) error { return r.tr(r.r.Scan(dest...)) }

// TranslateError maps the database's errors onto store's sentinels
// (store.ErrorTranslator).
func (d *driver) TranslateError(err error) error { return translate(err) }

// translate maps database/sql, SQLite and PostgreSQL errors onto store's
// sentinels, keeping the original error in the chain.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", store.ErrNoRows, err)
	}
	var se sqliteError
	if errors.As(err, &se) {
		switch se.Code() {
		case sqliteConstraintUnique, sqliteConstraintPrimaryKey:
			return fmt.Errorf("%w: %w", store.ErrUniqueViolation, err)
		case sqliteBusy, sqliteBusySnapshot, sqliteBusyTimeout, sqliteLocked:
			return fmt.Errorf("%w: %w", store.ErrLockTimeout, err)
		}
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return fmt.Errorf("%w: %w", store.ErrUniqueViolation, err)
		case "55P03":
			return fmt.Errorf("%w: %w", store.ErrLockTimeout, err)
		case "40001", "40P01":
			return fmt.Errorf("%w: %w", store.ErrSerialization, err)
		}
	}
	return err
}
