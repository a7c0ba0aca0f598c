// Package store is idem's storage seam: one small interface that every part
// of idem (inbox, HTTP keys, outbox, effects, dead letters) uses to run SQL
// inside the caller's own transaction, with a driver per database library.
//
//	d, err := pgxstore.New(pool, pgxstore.Config{}) // store.Driver[pgx.Tx] on your *pgxpool.Pool
//	err = store.InTx(ctx, d, func(tx pgx.Tx) error { // begin, commit; roll back on error or panic
//		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, orderID); err != nil {
//			return err
//		}
//		_, err := ob.EnqueueTx(ctx, tx, event) // every idem part takes the caller's TTx
//		return err
//	})
//	// the same code on *sql.Tx: sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
//
// Drivers:
//   - store/pgxstore: PostgreSQL through pgx v5 (pgxpool.Pool, pgx.Tx), the
//     production store.
//   - store/sqlstore: database/sql (*sql.DB, *sql.Tx), for SQLite through
//     modernc.org/sqlite (the embedded default, linked by the program with
//     import _ "modernc.org/sqlite") and for PostgreSQL through pgx's
//     stdlib adapter.
//
// The type parameter TTx is the caller's own transaction type, so handlers
// receive exactly the transaction their business code already uses. Both
// drivers pass the one conformance suite in internal/storetest, which also
// prepares every statement of [Driver.Statements] on each of them.
//
// SQL in idem is written once per dialect, with PostgreSQL-style $1
// placeholders (SQLite accepts them too). Timestamps are stored as BIGINT
// microseconds since the Unix epoch (UTC) on both dialects, so comparisons
// behave identically; see [Micros].
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/idemkit/idem/internal/sqlset"
)

// Dialect names the SQL dialect a driver speaks.
type Dialect string

// The dialects idem supports.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
	// MySQL is MySQL and MariaDB, through the idemmysql module
	// (github.com/idemkit/idem/store/idemmysql).
	MySQL Dialect = "mysql"
)

// Errors translated by the drivers, in one place, from the database's own
// codes. Check them with errors.Is.
var (
	// ErrNoRows is returned by Row.Scan when the query matched nothing.
	ErrNoRows = errors.New("store: no rows")
	// ErrUniqueViolation is a unique or primary key constraint violation
	// (PostgreSQL 23505, SQLite SQLITE_CONSTRAINT_UNIQUE/PRIMARYKEY).
	ErrUniqueViolation = errors.New("store: unique violation")
	// ErrLockTimeout is a lock wait that ran out (PostgreSQL 55P03
	// lock_not_available, SQLite SQLITE_BUSY).
	ErrLockTimeout = errors.New("store: lock timeout")
	// ErrSerialization is a serialization failure or deadlock (PostgreSQL
	// 40001/40P01); the whole transaction may be retried.
	ErrSerialization = errors.New("store: serialization failure")
)

// ErrorTranslator is implemented by drivers that map their database's
// errors onto this package's sentinels ([ErrSerialization],
// [ErrLockTimeout], [ErrUniqueViolation], [ErrNoRows]), keeping the
// original in the chain. The drivers' Queriers translate what they return;
// idem uses this for errors of a caller's own statements on the raw
// transaction (a handler writing through its pgx.Tx or *sql.Tx).
type ErrorTranslator interface {
	TranslateError(err error) error
}

// Querier runs SQL. A Querier obtained from [Driver.Tx] runs inside the
// caller's transaction; one from [Driver.Pool] runs each statement in its
// own implicit transaction.
type Querier interface {
	// Exec runs a statement and returns the number of rows affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a query returning rows. The caller must Close them.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow runs a query expected to return at most one row; Scan
	// returns ErrNoRows when there is none.
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows is the result of Querier.Query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is the result of Querier.QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// Driver binds idem to a database library. TTx is the library's transaction
// type (pgx.Tx, *sql.Tx). Implementations are safe for concurrent use.
type Driver[TTx any] interface {
	// Dialect is the SQL dialect of the database.
	Dialect() Dialect
	// Table returns the qualified name of one of idem's tables, e.g.
	// "idem".inbox on PostgreSQL or idem_inbox on SQLite.
	Table(name string) string
	// Names returns the schema / prefix configuration.
	Names() Names
	// Begin starts a read-write transaction (BEGIN IMMEDIATE on SQLite).
	Begin(ctx context.Context) (TTx, error)
	// Commit commits tx.
	Commit(ctx context.Context, tx TTx) error
	// Rollback rolls tx back; rolling back a finished transaction is a no-op.
	Rollback(ctx context.Context, tx TTx) error
	// Tx wraps the caller's transaction as a Querier.
	Tx(tx TTx) Querier
	// Pool is a Querier outside any transaction.
	Pool() Querier
	// Close releases what the driver opened itself (not the caller's pool).
	Close() error
	// Statements returns every statement idem runs, in the driver's
	// dialect, with idem's table names qualified.
	Statements() *sqlset.Set

	// Optional abilities. A driver declares each one; features ask
	// before using it and take their ordinary path when it is missing.
	// A driver that wraps another forwards them, so a wrapper never
	// silently loses a fast path.

	// SupportsPipeline reports whether BeginInsert, ExecCommit,
	// SendBatch, BeginReserved and EndReserved save round trips (rather
	// than running statement by statement).
	SupportsPipeline() bool
	// BeginInsert begins a transaction and runs insertSQL (a constant
	// statement with $n placeholders: an INSERT without ON CONFLICT, or
	// any other statement the transaction starts with, such as idemhttp's
	// lock) as its first statement, args bound as parameters, in one round
	// trip. When the statement hits a unique violation it rolls back and
	// returns inserted=false with no transaction open and a nil error; the
	// caller then takes its ordinary ON CONFLICT path. inserted=true means
	// the statement ran. ok=false (with a nil
	// error) means the fast path is unavailable and nothing was done.
	BeginInsert(ctx context.Context, insertSQL string, args ...any) (tx TTx, inserted, ok bool, err error)
	// ExecCommit runs stmt (a constant statement, args bound as
	// parameters) and commits tx in one round trip. ok=false means the
	// fast path does not apply to tx and nothing was done: the caller
	// runs stmt and Commit itself. A driver that SupportsPipeline accepts
	// at least the transactions its own BeginInsert started. Otherwise tx is over, committed when
	// err is nil and rolled back when not; a COMMIT that did not commit,
	// or a transaction that was no longer open or already aborted, is an
	// error.
	ExecCommit(ctx context.Context, tx TTx, stmt string, args ...any) (ok bool, err error)
	// SendBatch runs stmts in order on q (from Tx or Pool), in one round
	// trip when SupportsPipeline, otherwise one by one; it stops at the
	// first error and returns it (a database error translated like any
	// other: ErrUniqueViolation…). On Pool the statements share one
	// implicit transaction only when the driver pipelines them; atomicity
	// needs a Tx. A pipelining driver sent every statement before reading
	// the first result: a database error makes the server skip the rest,
	// but an error returned by a Rows callback does not, so the statements
	// after it may have run — send a batch whose Rows can fail on a Tx and
	// roll back on error.
	SendBatch(ctx context.Context, q Querier, stmts []Stmt) error
	// BeginReserved takes a connection for the caller alone, runs stmts
	// on it in one round trip outside any transaction (they share one
	// implicit transaction; session state they set, such as a
	// session-level advisory lock, lasts on the connection), and returns
	// a transaction on that connection whose BEGIN is sent together with
	// its first statement (none is sent when the transaction is never
	// used). The connection returns to the pool only through EndReserved,
	// which the caller must call exactly once, whatever happened. When
	// stmts fail, nothing is reserved: the error is returned, and the
	// connection is closed unless the first statement failed (so session
	// state set by the earlier ones dies with it). ok=false (nil error)
	// means the ability is missing and nothing was done.
	BeginReserved(ctx context.Context, stmts []Stmt) (tx TTx, ok bool, err error)
	// EndReserved ends a transaction of BeginReserved and releases its
	// connection, in one round trip: with commit, before runs in the
	// transaction and then COMMIT (a transaction never used is begun
	// first); without, the transaction is rolled back and before is not
	// run. after runs once the transaction is over, outside it (e.g.
	// releasing a session lock after the COMMIT made the work visible).
	// Nothing is sent when there is nothing to do. On any error nothing
	// is committed and the connection is closed, so no session state
	// outlives the call; a transaction that was aborted or already ended
	// cannot commit (wraps an error of the driver's library).
	EndReserved(ctx context.Context, tx TTx, commit bool, before, after []Stmt) error

	// SupportsListener reports whether Listen works (PostgreSQL
	// LISTEN/NOTIFY); Listen returns ErrNotSupported otherwise.
	SupportsListener() bool
	// Listen starts listening on channel (a plain identifier).
	Listen(ctx context.Context, channel string) (Listener, error)

	// SupportsAdvisoryLocks reports whether the dialect's statements take
	// advisory locks (PostgreSQL). Where it is false, the lock statements
	// of the Set are empty and writers are serialised by the database
	// itself (SQLite's single writer).
	SupportsAdvisoryLocks() bool
}

// Names configures where idem's tables live.
type Names struct {
	// Schema is the PostgreSQL schema holding idem's tables. Defaults to
	// "idem". Ignored on SQLite.
	Schema string
	// Prefix is prepended to every table name on SQLite. Defaults to "idem_".
	// Ignored on PostgreSQL.
	Prefix string
	// Layout is the shape of idem's tables: LayoutPlain (the default) or
	// LayoutPartitioned (PostgreSQL only: the inbox, idempotency keys and
	// effect ledger range-partitioned by expiry, the outbox by creation;
	// see package retention's Partition). It must match the
	// database: a store converted with retention.Partition is opened with
	// LayoutPartitioned by every process; a mismatch fails every inbox
	// insert loudly (no unique constraint matches, or no such function),
	// never silently.
	Layout Layout
}

// Layout names a shape of idem's tables (see Names.Layout).
type Layout string

const (
	// LayoutPlain is the default layout: one table per record kind,
	// expired rows deleted in bounded batches.
	LayoutPlain Layout = ""
	// LayoutPartitioned range-partitions the inbox, idempotency keys and
	// effect ledger by expires_at and the outbox by created_at on
	// PostgreSQL, so expiry drops whole partitions.
	LayoutPartitioned Layout = "partitioned"
)

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// WithDefaults returns n with empty fields set to their defaults, or an
// error wrapping idem's ErrInvalidOption style message if a name is not a
// plain SQL identifier.
func (n Names) WithDefaults() (Names, error) {
	if n.Schema == "" {
		n.Schema = "idem"
	}
	if n.Prefix == "" {
		n.Prefix = "idem_"
	}
	if !identRe.MatchString(n.Schema) {
		return n, fmt.Errorf("store: schema %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", n.Schema)
	}
	if n.Layout != LayoutPlain && n.Layout != LayoutPartitioned {
		return n, fmt.Errorf("store: layout %q is not %q or empty", n.Layout, LayoutPartitioned)
	}
	if !identRe.MatchString(n.Prefix) {
		return n, fmt.Errorf("store: prefix %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", n.Prefix)
	}
	return n, nil
}

// Table returns the qualified table name for dialect d.
func (n Names) Table(d Dialect, name string) string {
	if d == Postgres {
		return `"` + n.Schema + `".` + name
	}
	return n.Prefix + name
}

// Micros converts t to the stored representation: microseconds since the
// Unix epoch. The zero time maps to 0.
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// FromMicros converts a stored timestamp back to a UTC time; 0 maps to the
// zero time.
func FromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// InTx runs fn in a new transaction of d: commit when fn returns nil,
// rollback otherwise (also on panic, which is re-raised).
func InTx[TTx any](ctx context.Context, d Driver[TTx], fn func(tx TTx) error) (err error) {
	tx, err := d.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = d.Rollback(context.WithoutCancel(ctx), tx)
			panic(p)
		}
		if err != nil {
			_ = d.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return d.Commit(ctx, tx)
}

// Stmt is one statement of a [Driver.SendBatch].
type Stmt struct {
	// SQL is a constant statement; Args are bound as parameters.
	SQL  string
	Args []any
	// Rows, when set, reads the statement's rows (the driver closes
	// them afterwards); a statement without Rows is run for its effect.
	Rows func(Rows) error
	// Affected, when set, receives the number of rows the statement
	// affected (without Rows).
	Affected *int64
}

// Listener receives notifications on one channel (PostgreSQL
// LISTEN/NOTIFY). It holds one connection until Close.
type Listener interface {
	// Wait blocks until a notification arrives or ctx ends, and returns
	// the notification's payload.
	Wait(ctx context.Context) (payload string, err error)
	// Close stops listening and releases the connection.
	Close(ctx context.Context) error
}

// QueryListener is a Listener whose connection also runs statements
// between waits (pgxstore's listener is one, when the pool's connection
// settings allow it): its owner can claim and listen on one connection,
// never waiting for the pool. Statements and Wait must not run at the
// same time. A notification that arrives while statements run is kept and
// returned by the next Wait; a Wait that ends with its context ends at
// once and leaves the connection usable.
type QueryListener interface {
	Listener
	// Querier runs statements on the listening connection; pass it to
	// Driver.SendBatch (one round trip when the driver pipelines).
	Querier() Querier
	// Drain discards the notifications kept so far, without waiting, and
	// reports whether there were any.
	Drain() bool
	// Broken reports that the connection cannot run more statements: it
	// is closed, busy, or was left inside a transaction (after a failed
	// statement it is usually not: the server's error ends the batch).
	Broken() bool
}

// ErrNotSupported is returned by an optional ability a driver does not
// have; ask first with the matching Supports method.
var ErrNotSupported = errors.New("store: not supported by this driver")
