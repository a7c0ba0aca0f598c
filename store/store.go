// Package store is idem's storage seam: one small interface that every part
// of idem (inbox, HTTP keys, outbox, effects, dead letters) uses to run SQL
// inside the caller's own transaction, with a driver per database library.
//
// Drivers:
//   - store/pgxstore: PostgreSQL through pgx v5 (pgxpool.Pool, pgx.Tx), the
//     production store.
//   - store/sqlstore: database/sql (*sql.DB, *sql.Tx), for SQLite through
//     modernc.org/sqlite (the embedded default) and for PostgreSQL through
//     pgx's stdlib adapter.
//
// The type parameter TTx is the caller's own transaction type, so handlers
// receive exactly the transaction their business code already uses. Both
// drivers pass the one conformance suite in store/storetest.
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
)

// Dialect names the SQL dialect a driver speaks.
type Dialect string

// The dialects idem supports.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
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
}

// Names configures where idem's tables live.
type Names struct {
	// Schema is the PostgreSQL schema holding idem's tables. Defaults to
	// "idem". Ignored on SQLite.
	Schema string
	// Prefix is prepended to every table name on SQLite. Defaults to "idem_".
	// Ignored on PostgreSQL.
	Prefix string
}

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

// BeginInserter is implemented by drivers that can begin a transaction and
// run its first INSERT in a single round trip (pgxstore). The inbox uses it
// for first deliveries, saving one round trip per message.
type BeginInserter[TTx any] interface {
	// BeginInsert begins a transaction and runs insertSQL (a constant
	// INSERT without ON CONFLICT, with $n placeholders) as its first
	// statement, args bound as parameters: no SQL text is built from them.
	// When the INSERT hits a unique violation it rolls back and returns
	// inserted=false with no transaction open and a nil error; the caller
	// then takes its ordinary ON CONFLICT path. ok=false (with a nil error)
	// means the fast path is unavailable and nothing was done.
	BeginInsert(ctx context.Context, insertSQL string, args ...any) (tx TTx, inserted, ok bool, err error)
}

// CommitExecer is implemented by drivers that can run a transaction's last
// statement and its COMMIT in a single round trip (pgxstore, for
// transactions it began with BeginInsert).
type CommitExecer[TTx any] interface {
	// ExecCommit runs stmt (a constant statement, args bound as
	// parameters) and commits tx. ok=false means the fast path does not
	// apply to tx and nothing was done: the caller runs stmt and Commit
	// itself. Otherwise tx is over, committed when err is nil and rolled
	// back when not; a COMMIT that did not commit, or a transaction that
	// was no longer open or already aborted, is an error.
	ExecCommit(ctx context.Context, tx TTx, stmt string, args ...any) (ok bool, err error)
}
