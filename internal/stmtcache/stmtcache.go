// Package stmtcache keeps server-side prepared statements of a *sql.DB,
// one per SQL text, so that a statement with arguments costs one round
// trip instead of two (prepare, execute, and a close without an answer:
// what database/sql does for a driver that does not interpolate
// arguments, such as go-sql-driver/mysql by default).
//
// A Cache prepares each text once on the database (a *sql.Stmt), and
// database/sql prepares it once more on each connection the first time it
// runs there, keeping it for that connection's life. Only statements with
// arguments are cached (and none with more than 40, batches whose text
// changes with their size): they already go through the binary protocol,
// so the values a caller scans are of the same types as without the
// cache.
// The number of texts is bounded (see New); past it, or when the database
// cannot prepare a statement, the statement runs as it would without a
// Cache. Arguments always travel as parameters: no SQL text is built from
// a value.
package stmtcache

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// DefaultMax is the number of SQL texts a Cache keeps when New is given 0.
// With n connections a Cache holds at most n × max statements on the
// server (MySQL's max_prepared_stmt_count defaults to 16,382 for the whole
// server).
const DefaultMax = 64

// maxArgs is the most arguments a cached statement takes: longer ones are
// batches whose text changes with their size, which would fill the cache
// with texts run once.
const maxArgs = 40

// prepareWait bounds the wait for a connection to prepare a new text on
// when the pool has a maximum: the caller may hold the last connection
// itself (in a transaction), so a statement is prepared only when the pool
// has an idle connection, and one that cannot be prepared now runs
// uncached.
const prepareWait = 100 * time.Millisecond

// Cache is a bounded set of prepared statements of one *sql.DB. It is safe
// for concurrent use; the zero value is not usable (see New).
type Cache struct {
	db  *sql.DB
	max int

	mu     sync.RWMutex
	stmts  map[string]*sql.Stmt
	closed bool
}

// New returns a cache of at most max texts on db (0: DefaultMax; a
// negative max caches nothing).
func New(db *sql.DB, max int) *Cache {
	if max == 0 {
		max = DefaultMax
	}
	return &Cache{db: db, max: max, stmts: map[string]*sql.Stmt{}}
}

// stmt returns the prepared statement of text, preparing it when there is
// room, or nil when text is to run uncached.
func (c *Cache) stmt(ctx context.Context, text string) *sql.Stmt {
	if c == nil || c.max < 0 {
		return nil
	}
	c.mu.RLock()
	s, ok := c.stmts[text]
	full := len(c.stmts) >= c.max || c.closed
	c.mu.RUnlock()
	if ok || full {
		return s
	}
	pctx := ctx
	if st := c.db.Stats(); st.MaxOpenConnections > 0 {
		if st.Idle == 0 && st.OpenConnections >= st.MaxOpenConnections {
			return nil // no connection to prepare on now: run uncached, do not wait
		}
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, prepareWait)
		defer cancel()
	}
	s, err := c.db.PrepareContext(pctx, text)
	if err != nil {
		return nil // runs uncached, which reports the error if it is the statement's
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.stmts[text]; ok || len(c.stmts) >= c.max || c.closed {
		_ = s.Close()
		return old
	}
	c.stmts[text] = s
	return s
}

// on returns the statement of text for tx (nil: the database), or nil.
func (c *Cache) on(ctx context.Context, tx *sql.Tx, text string, args []any) *sql.Stmt {
	if len(args) == 0 || len(args) > maxArgs {
		return nil
	}
	s := c.stmt(ctx, text)
	if s == nil || tx == nil {
		return s
	}
	// Prepared on tx's connection the first time it runs there, then
	// reused; the transaction's handle is closed with the transaction.
	return tx.StmtContext(ctx, s)
}

// ExecContext runs text with args on tx (nil: on the database), through
// its prepared statement when it has one.
func (c *Cache) ExecContext(ctx context.Context, tx *sql.Tx, text string, args ...any) (sql.Result, error) {
	if s := c.on(ctx, tx, text, args); s != nil {
		return s.ExecContext(ctx, args...)
	}
	if tx != nil {
		return tx.ExecContext(ctx, text, args...)
	}
	return c.db.ExecContext(ctx, text, args...)
}

// QueryContext runs the query text with args on tx (nil: on the
// database), through its prepared statement when it has one.
func (c *Cache) QueryContext(ctx context.Context, tx *sql.Tx, text string, args ...any) (*sql.Rows, error) {
	if s := c.on(ctx, tx, text, args); s != nil {
		return s.QueryContext(ctx, args...)
	}
	if tx != nil {
		return tx.QueryContext(ctx, text, args...)
	}
	return c.db.QueryContext(ctx, text, args...)
}

// QueryRowContext runs the query text with args on tx (nil: on the
// database) and returns its first row, through its prepared statement
// when it has one.
func (c *Cache) QueryRowContext(ctx context.Context, tx *sql.Tx, text string, args ...any) *sql.Row {
	if s := c.on(ctx, tx, text, args); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	if tx != nil {
		return tx.QueryRowContext(ctx, text, args...)
	}
	return c.db.QueryRowContext(ctx, text, args...)
}

// DB returns the database of the cache.
func (c *Cache) DB() *sql.DB { return c.db }

// Len reports how many texts the cache holds.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.stmts)
}

// Close closes every prepared statement (on every connection) and makes
// the cache prepare no more; statements then run uncached.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var first error
	for text, s := range c.stmts {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.stmts, text)
	}
	return first
}
