package idemmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/internal/stmtcache"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// Dialect is the dialect name of MySQL and MariaDB ([store.MySQL]).
const Dialect = store.MySQL

// ErrNeedsFoundRows reports a *sql.DB whose connections were not opened
// with go-sql-driver's clientFoundRows=true: MySQL would then count an
// UPDATE that matched a row but changed nothing as affecting no row, and
// idem's fenced writes would report a lost lease.
var ErrNeedsFoundRows = errors.New("mysql: the connection must be opened with clientFoundRows=true")

// ErrNeedsStrictMode reports a *sql.DB whose sessions are not in a strict
// sql_mode (neither STRICT_ALL_TABLES nor STRICT_TRANS_TABLES): MySQL would
// then truncate an identifier too long for its column with a warning, and
// two distinct ids (two tenants) would share one row.
var ErrNeedsStrictMode = errors.New("mysql: the connection must run in a strict sql_mode (see mysql.SQLMode)")

// SQLMode is the sql_mode of every connection idem opens (Open, and DSN's
// sql_mode parameter), whatever the URL asks: strict, so a value too long
// for its column is an error (1406) and never truncated, and with none of
// the modes that change how idem's SQL parses (ANSI_QUOTES,
// PIPES_AS_CONCAT, NO_BACKSLASH_ESCAPES).
const SQLMode = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"

// Config configures a Driver.
type Config struct {
	// Names sets the table prefix (default "idem_"); Names.Schema is
	// ignored: idem's tables live in the connection's database.
	Names store.Names
	// StatementCache bounds how many SQL texts the driver keeps prepared
	// on the server, each on every connection that ran it, so that a
	// statement with arguments run through the driver (on Pool, or on Tx
	// of a transaction of Begin, as idem's packages and their handlers
	// do) costs one round trip instead of two (go-sql-driver prepares,
	// executes and closes it). 0 means 64; a
	// negative value prepares nothing. Mind the server's
	// max_prepared_stmt_count (16,382 by default, for all clients
	// together): each process holds at most StatementCache × its open
	// connections, and a server at that limit refuses the prepare
	// (error 1461) of a statement new to a connection.
	StatementCache int
}

// Driver implements store.Driver[*sql.Tx] on MySQL 8 and MariaDB 10.6+
// through database/sql and github.com/go-sql-driver/mysql. It is the
// sqlstore driver with this package's statements and a Querier that runs
// this dialect's scripts (see the package documentation).
type Driver struct {
	*sqlstore.Driver
	db      *sql.DB
	scripts *scripts
	stmts   *stmtcache.Cache
	txs     sync.Map // *sql.Tx → *txState, for transactions of Begin
	owned   bool
}

var _ store.Driver[*sql.Tx] = (*Driver)(nil)

// txState is a transaction started by Begin: its pinned connection, and
// whether a statement took a session lock (the migration lock) that must
// be released once the transaction is over.
type txState struct {
	conn   *sql.Conn
	mu     sync.Mutex
	locked bool
}

type dialectSQL struct{}

func (dialectSQL) Statements(n store.Names) *sqlset.Set { return Statements(n) }
func (dialectSQL) Translate(err error) error            { return Translate(err) }

// New returns a driver over the caller's *sql.DB, which must have been
// opened with clientFoundRows=true and a strict sql_mode (see [DSN]); New
// checks both on one connection and returns [ErrNeedsFoundRows] or
// [ErrNeedsStrictMode] otherwise. Close does not close db.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("mysql: nil *sql.DB")
	}
	sd, err := sqlstore.New(db, sqlstore.Config{Dialect: Dialect, SQL: dialectSQL{}, Names: cfg.Names})
	if err != nil {
		return nil, err
	}
	if err := checkSession(ctx, db); err != nil {
		return nil, err
	}
	return &Driver{Driver: sd, db: db, scripts: &scripts{}, stmts: stmtcache.New(db, cfg.StatementCache)}, nil
}

// checkSession checks a connection of db: its sql_mode must be strict, and
// an update of a row of a temporary table to its own value must affect 1
// row (clientFoundRows; without it, none).
func checkSession(ctx context.Context, db *sql.DB) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: connect: %w", err)
	}
	defer c.Close()
	var mode string
	if err := c.QueryRowContext(ctx, `SELECT @@SESSION.sql_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("mysql: probe: %w", err)
	}
	if !strictMode(mode) {
		return fmt.Errorf("%w (the session's is %q)", ErrNeedsStrictMode, mode)
	}
	for _, s := range []string{
		`CREATE TEMPORARY TABLE IF NOT EXISTS idem_found_rows_probe (id INT PRIMARY KEY)`,
		`INSERT IGNORE INTO idem_found_rows_probe (id) VALUES (1)`,
	} {
		if _, err := c.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("mysql: probe: %w", err)
		}
	}
	r, err := c.ExecContext(ctx, `UPDATE idem_found_rows_probe SET id = id WHERE id = 1`)
	if err != nil {
		return fmt.Errorf("mysql: probe: %w", err)
	}
	_, _ = c.ExecContext(ctx, `DROP TEMPORARY TABLE IF EXISTS idem_found_rows_probe`)
	if n, _ := r.RowsAffected(); n != 1 {
		return ErrNeedsFoundRows
	}
	return nil
}

// DSN converts a mysql://user:pass@host:3306/db?param=value URL into a
// go-sql-driver DSN with the options idem needs: clientFoundRows=true
// (fenced writes count matched rows) and sql_mode=[SQLMode] in place of
// any sql_mode the URL sets (a too-long identifier is refused, never
// truncated). Other query parameters are go-sql-driver's own and pass
// through; multiStatements is neither needed nor set. [Open] also sets
// SQLMode on each connection after the parameters, whatever they say.
func DSN(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("mysql: URL: %w", err)
	}
	if p.Scheme != "mysql" {
		return "", fmt.Errorf("mysql: URL scheme %q, want mysql://", p.Scheme)
	}
	db := strings.TrimPrefix(p.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", fmt.Errorf("mysql: URL %s names no database (want mysql://user:pass@host:3306/db)", redactURL(p))
	}
	host := p.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "3306")
	}
	cfg := mysqldrv.NewConfig()
	if p.User != nil {
		cfg.User = p.User.Username()
		cfg.Passwd, _ = p.User.Password()
	}
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", host, db
	if q := p.RawQuery; q != "" {
		parsed, err := mysqldrv.ParseDSN("/?" + q)
		if err != nil {
			return "", fmt.Errorf("mysql: URL parameters: %w", err)
		}
		parsed.User, parsed.Passwd, parsed.Net, parsed.Addr, parsed.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
		cfg = parsed
	}
	cfg.ClientFoundRows = true
	for k := range cfg.Params {
		if isSQLModeParam(k) {
			delete(cfg.Params, k)
		}
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["sql_mode"] = "'" + SQLMode + "'"
	return cfg.FormatDSN(), nil
}

// isSQLModeParam reports whether the go-sql-driver parameter k sets the
// session's sql_mode (sql_mode, SQL_MODE, @@session.sql_mode, …).
func isSQLModeParam(k string) bool {
	k = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(k)), "@@")
	k = strings.TrimPrefix(strings.TrimPrefix(k, "session."), "local.")
	return k == "sql_mode"
}

// strictMode reports whether an sql_mode value refuses, rather than
// truncates, a value too long for an InnoDB column.
func strictMode(mode string) bool {
	for m := range strings.SplitSeq(strings.ToUpper(mode), ",") {
		if m == "STRICT_ALL_TABLES" || m == "STRICT_TRANS_TABLES" {
			return true
		}
	}
	return false
}

// strictConnector opens go-sql-driver connections and sets [SQLMode] on
// each after the DSN's own parameters ran, so no parameter (a sql_mode of
// the URL, or one smuggled into another parameter's value, as the driver
// sends them in one SET statement) leaves a connection non-strict.
type strictConnector struct{ driver.Connector }

// Connect opens a connection and sets its sql_mode; a connection that
// cannot be set is closed and the error returned.
func (c strictConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("mysql: the driver's connection cannot execute statements")
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION sql_mode = '"+SQLMode+"'", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("mysql: set sql_mode: %w", err)
	}
	return conn, nil
}

// ServerDSN is [DSN] selecting no database: for statements on the server
// of u (CREATE DATABASE, DROP DATABASE) whether or not u's database
// exists.
func ServerDSN(u string) (string, error) {
	d, err := DSN(u)
	if err != nil {
		return "", err
	}
	cfg, err := mysqldrv.ParseDSN(d)
	if err != nil {
		return "", fmt.Errorf("mysql: %w", err)
	}
	cfg.DBName = ""
	return cfg.FormatDSN(), nil
}

func redactURL(p *url.URL) string {
	c := *p
	if c.User != nil {
		c.User = url.User(c.User.Username())
	}
	return c.String()
}

// Open opens the mysql:// URL (see [DSN]) and returns a driver that owns
// its *sql.DB. Every connection of the pool runs in [SQLMode], set after
// the URL's parameters.
func Open(ctx context.Context, u string, cfg Config) (*Driver, error) {
	dsn, err := DSN(u)
	if err != nil {
		return nil, err
	}
	mc, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	conn, err := mysqldrv.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(strictConnector{conn})
	db.SetMaxIdleConns(32)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: connect: %w", err)
	}
	d, err := New(ctx, db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// Close closes the driver's prepared statements, and the *sql.DB when
// Open opened it.
func (d *Driver) Close() error {
	err := d.stmts.Close()
	if d.owned {
		return d.db.Close()
	}
	return err
}

// Begin starts a READ COMMITTED transaction on a connection of its own (so
// that a session lock taken in it, the migration lock, is released on that
// connection once the transaction is over). The caller's own transactions
// keep whatever isolation the caller chose.
func (d *Driver) Begin(ctx context.Context) (*sql.Tx, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, Translate(err)
	}
	tx, err := c.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		c.Close()
		return nil, Translate(err)
	}
	d.txs.Store(tx, &txState{conn: c})
	return tx, nil
}

// Commit commits tx.
func (d *Driver) Commit(ctx context.Context, tx *sql.Tx) error {
	err := tx.Commit()
	d.done(ctx, tx)
	return Translate(err)
}

// Rollback rolls tx back; a finished transaction is not an error.
func (d *Driver) Rollback(ctx context.Context, tx *sql.Tx) error {
	err := tx.Rollback()
	d.done(ctx, tx)
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return Translate(err)
}

// done releases the session locks of a finished transaction of Begin and
// gives its connection back to the pool (or discards the connection when
// the release fails, which ends the session and its locks).
func (d *Driver) done(ctx context.Context, tx *sql.Tx) {
	v, ok := d.txs.LoadAndDelete(tx)
	if !ok {
		return
	}
	st := v.(*txState)
	st.mu.Lock()
	locked := st.locked
	st.mu.Unlock()
	if locked {
		if _, err := st.conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_ALL_LOCKS()`); err != nil {
			_ = st.conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	_ = st.conn.Close()
}

// Tx wraps the caller's transaction as a store.Querier that runs this
// dialect's scripts on it.
func (d *Driver) Tx(tx *sql.Tx) store.Querier {
	var st *txState
	if v, ok := d.txs.Load(tx); ok {
		st = v.(*txState)
	}
	if st != nil { // a transaction of Begin: on d.db, so its statements can be cached
		return querier{d: d, c: cached{d.stmts, tx}, st: st}
	}
	return querier{d: d, c: tx}
}

// Pool returns a store.Querier outside any transaction; a script run on it
// runs in a READ COMMITTED transaction of its own.
func (d *Driver) Pool() store.Querier { return querier{d: d, c: cached{d.stmts, nil}, pool: true} }

// TranslateError is [Translate] (store.ErrorTranslator).
func (d *Driver) TranslateError(err error) error { return Translate(err) }

// Translate maps MySQL errors onto store's sentinels, keeping the original
// in the chain: 1062 (ER_DUP_ENTRY) → store.ErrUniqueViolation, 1213
// (ER_LOCK_DEADLOCK) → store.ErrSerialization, 1205
// (ER_LOCK_WAIT_TIMEOUT) and 3572 (ER_LOCK_NOWAIT) → store.ErrLockTimeout.
// database/sql's ErrNoRows is store.ErrNoRows.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", store.ErrNoRows, err)
	}
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062:
			return fmt.Errorf("%w: %w", store.ErrUniqueViolation, err)
		case 1213:
			return fmt.Errorf("%w: %w", store.ErrSerialization, err)
		case 1205, 3572:
			return fmt.Errorf("%w: %w", store.ErrLockTimeout, err)
		}
	}
	return err
}

// querier is the dialect's store.Querier.
type querier struct {
	d    *Driver
	c    conn
	st   *txState // a transaction of Begin, or nil
	pool bool
}

func (q querier) script(ctx context.Context, text string, args []any) (result, error) {
	s, err := q.d.scripts.get(text)
	if err != nil {
		return result{}, err
	}
	if !q.pool {
		res, err := s.run(ctx, q.c, args)
		if res.locked {
			if q.st == nil {
				return res, fmt.Errorf("mysql: a session lock needs a transaction of Driver.Begin, which releases it")
			}
			q.st.mu.Lock()
			q.st.locked = true
			q.st.mu.Unlock()
		}
		return res, Translate(err)
	}
	tx, err := q.d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return result{}, Translate(err)
	}
	res, err := s.run(ctx, cached{q.d.stmts, tx}, args)
	if err == nil && res.locked {
		err = fmt.Errorf("mysql: a session lock needs a transaction of Driver.Begin, which releases it")
	}
	if err != nil {
		_ = tx.Rollback()
		return res, Translate(err)
	}
	return res, Translate(tx.Commit())
}

func (q querier) Exec(ctx context.Context, text string, args ...any) (int64, error) {
	s, err := q.d.scripts.get(text)
	if err != nil {
		return 0, err
	}
	if s.plain {
		st := &s.steps[0]
		t, a, err := st.bind(args, nil)
		if err != nil {
			return 0, err
		}
		res, err := q.c.ExecContext(ctx, t, a...)
		if err != nil {
			return 0, Translate(err)
		}
		n, err := res.RowsAffected()
		return n, Translate(err)
	}
	res, err := q.script(ctx, text, args)
	return res.affected, err
}

func (q querier) Query(ctx context.Context, text string, args ...any) (store.Rows, error) {
	s, err := q.d.scripts.get(text)
	if err != nil {
		return nil, err
	}
	if s.plain {
		st := &s.steps[0]
		t, a, err := st.bind(args, nil)
		if err != nil {
			return nil, err
		}
		rows, err := q.c.QueryContext(ctx, t, a...)
		if err != nil {
			return nil, Translate(err)
		}
		return sqlRows{rows}, nil
	}
	res, err := q.script(ctx, text, args)
	if err != nil {
		return nil, err
	}
	return &memRows{rows: res.rows}, nil
}

func (q querier) QueryRow(ctx context.Context, text string, args ...any) store.Row {
	s, err := q.d.scripts.get(text)
	if err != nil {
		return memRow{err: err}
	}
	if s.plain {
		st := &s.steps[0]
		t, a, err := st.bind(args, nil)
		if err != nil {
			return memRow{err: err}
		}
		return sqlRow{q.c.QueryRowContext(ctx, t, a...)}
	}
	res, err := q.script(ctx, text, args)
	return memRow{rows: res.rows, err: err}
}

// cached runs statements on tx (nil: the pool) of the driver's *sql.DB
// through its prepared statements (see internal/stmtcache).
type cached struct {
	c  *stmtcache.Cache
	tx *sql.Tx
}

// uncached is c without the cache.
func (c cached) uncached() conn {
	if c.tx != nil {
		return c.tx
	}
	return c.c.DB()
}

func (c cached) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.c.ExecContext(ctx, c.tx, query, args...)
}

func (c cached) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(ctx, c.tx, query, args...)
}

func (c cached) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.c.QueryRowContext(ctx, c.tx, query, args...)
}

type sqlRows struct{ r *sql.Rows }

func (r sqlRows) Next() bool             { return r.r.Next() }
func (r sqlRows) Scan(dest ...any) error { return Translate(r.r.Scan(dest...)) }
func (r sqlRows) Err() error             { return Translate(r.r.Err()) }
func (r sqlRows) Close()                 { _ = r.r.Close() }

type sqlRow struct{ r *sql.Row }

func (r sqlRow) Scan(dest ...any) error { return Translate(r.r.Scan(dest...)) }

// Prepare checks every statement of text (one statement or a script) in
// the server's own way without running it: each is prepared, inside a
// transaction rolled back afterwards, so the server parses it and resolves
// every table and column it names. For the conformance suite.
func (d *Driver) Prepare(ctx context.Context, text string) error {
	s, err := d.scripts.get(text)
	if err != nil {
		return err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return Translate(err)
	}
	defer tx.Rollback()
	for i := range s.steps {
		st := &s.steps[i]
		max := 0
		for _, k := range st.args {
			max = maxInt(max, k)
		}
		q, _, err := st.bind(make([]any, max), []any{nil})
		if err != nil {
			return err
		}
		p, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("statement %d of %d: %w", i+1, len(s.steps), Translate(err))
		}
		_ = p.Close()
	}
	return nil
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
