// Package pgxstore is idem's PostgreSQL driver on pgx v5: handlers receive
// the caller's pgx.Tx, and idem's statements run on a pgxpool.Pool.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/shop") // your pool, shared with your code
//	d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: "idem"}}) // idem's tables' schema
//	if err := migrate.Up(ctx, d); err != nil { … }
//	ib, err := inbox.New(d, inbox.Config{})
//	res, err := ib.Process(ctx, "billing", msg, func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, msg.Key) // your pgx.Tx
//		return err
//	})
//	// pgxstore.Open(ctx, url, pgxstore.Config{}) opens a pool of its own, closed by d.Close
//
// It is the production store. It runs unchanged on PostgreSQL-compatible
// engines that support ON CONFLICT, RETURNING, SAVEPOINT and FOR UPDATE SKIP
// LOCKED.
//
// No SQL text is built from values: idem passes every value as an
// argument, which pgx sends as a bound parameter in all its
// extended-protocol modes (the default). The one-round-trip paths
// (BeginInsert, ExecCommit) pipeline prepared statements
// in a pgx.Batch; they are declined on a pool configured for pgx's simple
// protocol (QueryExecModeSimpleProtocol), where pgx itself interpolates the
// values, and idem then takes its ordinary path.
package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/dialect/postgres"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Config configures a Driver.
type Config struct {
	// Names sets the schema of idem's tables. Defaults to schema "idem".
	Names store.Names
}

// Driver implements store.Driver[pgx.Tx] on a pgxpool.Pool. It is safe for
// concurrent use. Its documented methods are the handle a service uses
// (PgxPool, Close, Dialect, Names); the transactional methods idem's
// packages call (Begin, Tx, BeginReserved, SendBatch, …) come from an
// embedded implementation: they are not application API and not covered by
// semver (run your own transactions with store.InTx or on PgxPool).
type Driver struct{ *driver }

// driver is Driver's implementation of store.Driver.
type driver struct {
	pool  *pgxpool.Pool
	names store.Names
	owned bool
	// mode is the pool's query exec mode, read once: the fast paths of
	// BeginInsert and ExecCommit depend on it.
	mode pgx.QueryExecMode
	// traced: the pool's connections may have a pgx tracer (one in its
	// ConnConfig, or a BeforeConnect that could set one), which sees the
	// statements of a pgx.Batch but not those of a pgconn batch: the
	// reserved path then sends pgx batches (see sendPrepared).
	traced bool
	// prepared maps the statements the fast paths prepare by name on
	// each connection to that name ("": not prepared by name): idem's own
	// (at most maxPrepared, counted by preparedN, named by their SQL) and
	// handlers' (a reserved transaction's first statement: at most
	// maxHandlerPrepared, counted by handlerN, so that a service's
	// statements never take the room of idem's; see handlerName).
	prepared   sync.Map
	preparedMu sync.Mutex
	preparedN  int
	handlerN   int

	stmts *sqlset.Set
}

var _ store.Driver[pgx.Tx] = (*Driver)(nil)

// New returns a driver over the caller's pool. Close does not close it.
func New(pool *pgxpool.Pool, cfg Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("pgxstore: nil pool")
	}
	names, err := cfg.Names.WithDefaults()
	if err != nil {
		return nil, err
	}
	pc := pool.Config()
	return &Driver{&driver{pool: pool, names: names, mode: pc.ConnConfig.DefaultQueryExecMode,
		traced: pc.ConnConfig.Tracer != nil || pc.BeforeConnect != nil, stmts: postgres.Statements(names)}}, nil
}

// Open connects a new pool to connString ("postgres://…") and returns a
// driver that owns it: Close closes the pool.
func Open(ctx context.Context, connString string, cfg Config) (*Driver, error) {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgxstore: connect: %w", err)
	}
	d, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// PgxPool returns the underlying pool (for LISTEN/NOTIFY and the caller's
// own queries).
func (d *Driver) PgxPool() *pgxpool.Pool { return d.pool }

// Dialect returns store.Postgres.
func (d *Driver) Dialect() store.Dialect { return store.Postgres }

// Names returns the configured names.
func (d *Driver) Names() store.Names { return d.names }

// Table returns "schema".name.
func (d *driver) Table(name string) string { return d.names.Table(store.Postgres, name) }

// Begin starts a transaction at the pool's default isolation (READ
// COMMITTED unless the server says otherwise).
func (d *driver) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	return tx, translate(err)
}

// Commit commits tx.
func (d *driver) Commit(ctx context.Context, tx pgx.Tx) error { return translate(tx.Commit(ctx)) }

// Rollback rolls tx back; a finished transaction is not an error.
func (d *driver) Rollback(ctx context.Context, tx pgx.Tx) error {
	err := tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return translate(err)
}

// Tx wraps tx as a store.Querier.
func (d *driver) Tx(tx pgx.Tx) store.Querier { return querier{tx} }

// Pool returns a store.Querier on the pool.
func (d *driver) Pool() store.Querier { return querier{d.pool} }

// Close closes the pool if Open created it.
func (d *Driver) Close() error {
	if d.owned {
		d.pool.Close()
	}
	return nil
}

// conn is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type querier struct{ c conn }

func (q querier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.c.Exec(ctx, sql, args...)
	if err != nil {
		return 0, translate(err)
	}
	return tag.RowsAffected(), nil
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	rows, err := q.c.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate(err)
	}
	return pgxRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	return pgxRow{q.c.QueryRow(ctx, sql, args...)}
}

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Scan(dest ...any) error { return translate(r.Rows.Scan(dest...)) }
func (r pgxRows) Err() error             { return translate(r.Rows.Err()) }

type pgxRow struct{ r pgx.Row }

func (r pgxRow) Scan(dest ...any) error { return translate(r.r.Scan(dest...)) }

// TranslateError maps PostgreSQL's errors onto store's sentinels
// (store.ErrorTranslator).
func (d *driver) TranslateError(err error) error { return translate(err) }

func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", store.ErrNoRows, err)
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
