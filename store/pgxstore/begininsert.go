package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The transaction statements of the fast paths. They differ from the
// "begin" and "commit" pgx runs for Conn.Begin and Tx.Commit, so preparing
// them (named by their SQL, as idem's other statements: see prepare)
// changes nothing for the caller's own transactions on the pool.
const (
	beginSQL  = "BEGIN"
	commitSQL = "COMMIT"
)

// maxPrepared bounds the distinct statements of idem's own that the fast
// paths prepare by name on every connection. idem passes a handful of
// constant statements; past the bound, statements go through pgx's own
// statement cache. Handlers' statements have a room of their own
// (maxHandlerPrepared).
const maxPrepared = 64

// BeginInsert begins a transaction and runs insertSQL in the same round
// trip: BEGIN and the INSERT travel as one pipelined pgx.Batch
// (pgx.Batch.BeginTx), the INSERT with its arguments as bound parameters.
// No SQL text is built from the arguments.
//
// Both statements are prepared, once per connection, the first time they
// run on it (one round trip each); from then on BeginInsert is one round
// trip. A unique violation rolls the transaction back and reports
// inserted=false: the caller decides the duplicate with its ordinary ON
// CONFLICT path. Such a violation is logged by the server as an ERROR; idem
// only takes this path where duplicates are rare races or replays.
//
// The fast path is declined (ok=false, nothing done) when the pool runs
// queries in the simple protocol (pgx.QueryExecModeSimpleProtocol), where
// pgx would render the arguments into the SQL text.
//
// The transaction returned is a pgx.Tx on one pooled connection, released
// when it ends. Savepoints (Begin), Exec, Query, QueryRow, SendBatch,
// CopyFrom, Prepare and Conn behave as on any pgx transaction; see
// ExecCommit for LargeObjects.
func (d *driver) BeginInsert(ctx context.Context, insertSQL string, args ...any) (pgx.Tx, bool, bool, error) {
	if d.mode == pgx.QueryExecModeSimpleProtocol {
		return nil, false, false, nil
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, false, false, translate(err)
	}
	conn := c.Conn()
	if err := d.prepare(ctx, conn, beginSQL, insertSQL); err != nil {
		c.Release()
		return nil, false, false, translate(err)
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: beginSQL})
	b.Queue(insertSQL, args...)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	_, err = br.Exec() // BEGIN
	if err == nil {
		_, err = br.Exec() // the INSERT
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return &pooledTx{d: d, tx: tx, c: c}, true, true, nil
	}
	if conn.PgConn().TxStatus() != 'I' {
		// The INSERT failed after BEGIN: end the aborted transaction
		// before the connection goes back. A failed ROLLBACK closes the
		// connection (pgx), which the pool then discards: either way no
		// transaction is left open.
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
	unprepared := closeIfUnprepared(ctx, conn, err)
	c.Release()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return nil, false, true, nil
	case unprepared:
		// Nothing was done: the caller's ordinary path runs on another
		// connection.
		return nil, false, false, nil
	}
	return nil, false, false, translate(err)
}

// closeIfUnprepared closes conn when err says a prepared statement is gone
// from its session (someone ran DEALLOCATE on it): pgx would keep using the
// missing name, so the pool must replace the connection instead.
func closeIfUnprepared(ctx context.Context, conn *pgx.Conn, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "26000" {
		_ = conn.Close(context.WithoutCancel(ctx))
		return true
	}
	return false
}

// ExecCommit runs stmt and COMMIT in one round trip, one pipelined
// pgx.Batch with the arguments as bound parameters, for a transaction
// BeginInsert started. It reports ok=false, doing nothing, for any other
// transaction, and for one whose LargeObjects were taken (the caller then
// runs stmt and Commit itself). The statement's row count is not reported.
//
// Otherwise the transaction is over when ExecCommit returns and its
// connection is back in the pool: committed when err is nil, and rolled
// back when not. It is an error, with nothing committed by ExecCommit, when
// the transaction was no longer open (the handler ran COMMIT or ROLLBACK
// itself: wraps pgx.ErrTxClosed) or was aborted by an earlier failed
// statement, and when the COMMIT did not commit (its command tag is not
// COMMIT, or the connection is still in a transaction afterwards): both wrap
// pgx.ErrTxCommitRollback.
func (d *driver) ExecCommit(ctx context.Context, tx pgx.Tx, stmt string, args ...any) (bool, error) {
	t, ok := tx.(*pooledTx)
	if !ok || t.d != d || t.lo.Load() || !t.closed.CompareAndSwap(false, true) {
		return false, nil
	}
	defer t.release()
	conn := t.tx.Conn()
	if st := conn.PgConn().TxStatus(); st != 'T' {
		_ = t.tx.Rollback(context.WithoutCancel(ctx))
		if st == 'E' {
			return true, fmt.Errorf("pgxstore: the transaction was aborted by an earlier failed statement, rolled back: %w", pgx.ErrTxCommitRollback)
		}
		return true, fmt.Errorf("pgxstore: the transaction was ended by a COMMIT or ROLLBACK of its own (status %q); ExecCommit ran nothing: %w", st, pgx.ErrTxClosed)
	}
	if err := d.prepare(ctx, conn, stmt, commitSQL); err != nil {
		_ = t.tx.Rollback(context.WithoutCancel(ctx))
		return true, translate(err)
	}
	b := &pgx.Batch{}
	b.Queue(stmt, args...)
	b.Queue(commitSQL)
	br := t.tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("pgxstore: COMMIT answered %q: %w", tag.String(), pgx.ErrTxCommitRollback)
	}
	if conn.PgConn().TxStatus() != 'I' {
		if err == nil {
			err = fmt.Errorf("pgxstore: still in a transaction after COMMIT, rolled back: %w", pgx.ErrTxCommitRollback)
		}
		_ = t.tx.Rollback(context.WithoutCancel(ctx))
	}
	_ = closeIfUnprepared(ctx, conn, err)
	return true, translate(err)
}

// prepare prepares each statement by name on conn unless it is already
// (pgx.Conn.Prepare with the SQL as its name: batches then use it, and a
// failed batch does not evict it as it would a statement-cache entry). In
// modes other than pgx's default statement cache nothing is prepared by
// name: those modes are chosen to avoid named statements.
func (d *driver) prepare(ctx context.Context, conn *pgx.Conn, sqls ...string) error {
	if d.mode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	for _, sql := range sqls {
		name := d.preparedName(sql)
		if name == "" {
			continue
		}
		if _, err := conn.Prepare(ctx, name, sql); err != nil {
			return err
		}
	}
	return nil
}

// maxHandlerPrepared bounds the statements of handlers (beside idem's
// maxPrepared) that a reserved transaction's first Exec, Query or QueryRow
// prepares by name on every connection; past it, a first statement goes
// through pgx's batch.
const maxHandlerPrepared = 32

// handlerName returns the name a handler's statement is prepared under on
// every connection ("" when it is not: the room is full, or the server
// refused to prepare it). The name is not the SQL, so that pgx, which
// looks a statement's text up among the connection's named statements
// first, never runs the service's own queries through it (they keep pgx's
// statement cache, which re-prepares after a schema change), and it is a
// hash of the SQL, so that two drivers on one pool agree on it.
func (d *driver) handlerName(sql string) string {
	return d.nameOf(sql, &d.handlerN, maxHandlerPrepared, func(sql string) string {
		h := fnv.New64a()
		_, _ = h.Write([]byte(sql))
		return "idem_h_" + strconv.FormatUint(h.Sum64(), 16)
	})
}

// refuseHandler records that the server would not prepare a handler's
// statement (the name of a statement the service prepared itself, several
// statements in one string, a mistake): as a first statement it goes
// through pgx's batch from now on, which runs it as pgx always does. The
// statement keeps its place in the room, so the refusals stay bounded
// too.
func (d *driver) refuseHandler(sql string) {
	d.prepared.Store(sql, "")
}

// preparedName returns the name sql is prepared under on every connection:
// the SQL itself for idem's statements, at most maxPrepared of them, and ""
// past that bound (or for a handler's statement the server refused).
func (d *driver) preparedName(sql string) string {
	return d.nameOf(sql, &d.preparedN, maxPrepared, func(sql string) string { return sql })
}

// nameOf returns the name sql is prepared under, giving it one (name(sql))
// when it has none yet and *n, the count of its kind, is below limit.
func (d *driver) nameOf(sql string, n *int, limit int, name func(string) string) string {
	if v, ok := d.prepared.Load(sql); ok {
		return v.(string)
	}
	d.preparedMu.Lock()
	defer d.preparedMu.Unlock()
	if v, ok := d.prepared.Load(sql); ok {
		return v.(string)
	}
	if *n >= limit {
		return ""
	}
	nm := name(sql)
	d.prepared.Store(sql, nm)
	*n++
	return nm
}

// closedTx is a transaction that is over: every method reports
// pgx.ErrTxClosed (pgx's own closed transaction, from the public
// FailedBatchResults).
var closedTx = func() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}()

// pooledTx is the transaction of BeginInsert: pgx's own transaction from
// pgx.Batch.BeginTx on a connection acquired from the pool, returned to the
// pool exactly once when the transaction ends (Commit, Rollback or
// ExecCommit), like pgxpool.Tx. After the end every method reports
// pgx.ErrTxClosed, also when ExecCommit ended the transaction without pgx's
// Tx knowing.
type pooledTx struct {
	d      *driver
	tx     pgx.Tx
	c      *pgxpool.Conn
	once   sync.Once
	closed atomic.Bool
	lo     atomic.Bool  // LargeObjects handed out: they reach tx directly, so ExecCommit declines
	sp     atomic.Int64 // savepoints begun
}

var _ pgx.Tx = (*pooledTx)(nil)

func (t *pooledTx) release() { t.once.Do(t.c.Release) }

// live returns the transaction, or closedTx once it has ended.
func (t *pooledTx) live() pgx.Tx {
	if t.closed.Load() {
		return closedTx
	}
	return t.tx
}

// Begin starts a pseudo nested transaction on a savepoint, as pgx does.
func (t *pooledTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return beginSavepoint(ctx, t.tx, t, t.sp.Add(1))
}

// Commit commits the transaction and releases the connection.
func (t *pooledTx) Commit(ctx context.Context) error {
	if !t.closed.CompareAndSwap(false, true) {
		return pgx.ErrTxClosed
	}
	defer t.release()
	return t.tx.Commit(ctx)
}

// Rollback rolls the transaction back and releases the connection.
func (t *pooledTx) Rollback(ctx context.Context) error {
	if !t.closed.CompareAndSwap(false, true) {
		return pgx.ErrTxClosed
	}
	defer t.release()
	return t.tx.Rollback(ctx)
}

func (t *pooledTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.live().CopyFrom(ctx, table, cols, src)
}

func (t *pooledTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.live().SendBatch(ctx, b)
}

// LargeObjects returns pgx's LargeObjects of the transaction. pgx offers no
// way to build them on another Tx, so they use the inner transaction
// directly; taking them makes ExecCommit decline, so that the transaction
// ends through pgx's own Commit or Rollback and they stop working with it.
func (t *pooledTx) LargeObjects() pgx.LargeObjects {
	if t.closed.Load() {
		return closedTx.LargeObjects()
	}
	t.lo.Store(true)
	return t.tx.LargeObjects()
}

func (t *pooledTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.live().Prepare(ctx, name, sql)
}

func (t *pooledTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.live().Exec(ctx, sql, args...)
}

func (t *pooledTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.live().Query(ctx, sql, args...)
}

func (t *pooledTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.live().QueryRow(ctx, sql, args...)
}

// Conn returns the connection, like pgxpool.Tx (also after the end, when
// it is back in the pool and must not be used).
func (t *pooledTx) Conn() *pgx.Conn { return t.tx.Conn() }

// savepointTx is a pseudo nested transaction of a pooledTx or a
// reservedTx, with pgx's semantics: Commit releases the savepoint,
// Rollback rolls back to it, and either ends it; everything else runs on
// the outer transaction (the embedded Tx) while both are open, and reports
// pgx.ErrTxClosed after, also once the outer transaction has ended (its
// own statements then report it).
type savepointTx struct {
	pgx.Tx // the outer transaction, closedTx once the savepoint has ended
	root   pgx.Tx
	n      int64
}

var _ pgx.Tx = (*savepointTx)(nil)

// beginSavepoint opens savepoint n on tx, the connection's transaction
// under root (a pooled or reserved transaction), and returns it as
// root's nested transaction.
func beginSavepoint(ctx context.Context, tx, root pgx.Tx, n int64) (pgx.Tx, error) {
	// The name is made of idem's own counter, never of a value.
	if _, err := tx.Exec(ctx, "savepoint sp_"+strconv.FormatInt(n, 10)); err != nil {
		return nil, err
	}
	return &savepointTx{Tx: root, root: root, n: n}, nil
}

// Commit releases the savepoint.
func (s *savepointTx) Commit(ctx context.Context) error {
	return s.end(ctx, "release savepoint sp_")
}

// Rollback rolls back to the savepoint.
func (s *savepointTx) Rollback(ctx context.Context) error {
	return s.end(ctx, "rollback to savepoint sp_")
}

func (s *savepointTx) end(ctx context.Context, stmt string) error {
	if s.Tx == closedTx {
		return pgx.ErrTxClosed
	}
	s.Tx = closedTx
	_, err := s.root.Exec(ctx, stmt+strconv.FormatInt(s.n, 10))
	return err
}

// Conn returns the connection, also after the end (as pgx does).
func (s *savepointTx) Conn() *pgx.Conn { return s.root.Conn() }
