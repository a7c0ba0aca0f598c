package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store"
)

// rollbackSQL ends a reserved transaction that is not committed; like
// beginSQL and commitSQL it differs from pgx's own spelling.
const rollbackSQL = "ROLLBACK"

// queueStmts queues stmts on b, each with the callback its Stmt asks for
// (Affected, Rows). ran, when not nil, counts the statements the server
// completed, so a caller knows whether the first one took effect.
func queueStmts(b *pgx.Batch, stmts []store.Stmt, ran *int) {
	for i := range stmts {
		s := stmts[i]
		qq := b.Queue(s.SQL, s.Args...)
		if s.Rows != nil {
			qq.Query(func(rows pgx.Rows) error {
				err := s.Rows(pgxRows{rows})
				rows.Close()
				if rows.Err() == nil && ran != nil {
					*ran++
				}
				if err == nil {
					err = rows.Err()
				}
				return err
			})
			continue
		}
		qq.Exec(func(tag pgconn.CommandTag) error {
			if ran != nil {
				*ran++
			}
			if s.Affected != nil {
				*s.Affected = tag.RowsAffected()
			}
			return nil
		})
	}
}

// prepareStmts is prepare for the statements of stmts lists, without
// gathering their SQL first (the fast paths run per request).
func (d *driver) prepareStmts(ctx context.Context, conn *pgx.Conn, lists ...[]store.Stmt) error {
	for _, ss := range lists {
		for _, s := range ss {
			if err := d.prepare(ctx, conn, s.SQL); err != nil {
				return err
			}
		}
	}
	return nil
}

// BeginReserved acquires a connection, runs stmts on it as one pipelined
// pgx.Batch (one round trip, one implicit transaction, arguments bound as
// parameters), and returns a transaction on that connection whose BEGIN
// travels in the same batch as its first Exec, Query or QueryRow: a
// transaction that runs one statement before EndReserved costs one round
// trip for it, BEGIN included. Other methods (SendBatch, CopyFrom,
// Prepare, Begin, LargeObjects, Conn) send BEGIN first on its own.
//
// Session state that stmts set on the connection (a session-level
// advisory lock) stays until EndReserved, which the caller must call once;
// Commit and Rollback on the transaction end it but keep the connection
// reserved. When stmts fail the error is returned and nothing is
// reserved; the connection is closed unless no statement completed, so a
// lock taken by the first one never goes back to the pool.
//
// The ability is declined (ok=false, nothing done) on the simple protocol.
func (d *driver) BeginReserved(ctx context.Context, stmts []store.Stmt) (pgx.Tx, bool, error) {
	if d.mode == pgx.QueryExecModeSimpleProtocol {
		return nil, false, nil
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, false, translate(err)
	}
	conn := c.Conn()
	if err := d.prepareStmts(ctx, conn, stmts); err != nil {
		_ = closeIfUnprepared(ctx, conn, err)
		c.Release()
		return nil, false, translate(err)
	}
	if len(stmts) > 0 {
		ran := 0
		sent, _, err := d.sendPrepared(ctx, conn, stmts, -1, &ran)
		if !sent && err == nil {
			b := &pgx.Batch{}
			queueStmts(b, stmts, &ran)
			err = conn.SendBatch(ctx, b).Close()
		}
		if err != nil {
			if ran > 0 || conn.PgConn().TxStatus() != 'I' {
				_ = conn.Close(context.WithoutCancel(ctx))
			} else {
				_ = closeIfUnprepared(ctx, conn, err)
			}
			c.Release()
			return nil, false, translate(err)
		}
	}
	return &reservedTx{d: d, c: c}, true, nil
}

// EndReserved ends a transaction of BeginReserved as one pipelined batch:
// with commit, [BEGIN when the transaction was never used,] before,
// COMMIT, after; without, ROLLBACK (when it was used) and after. Nothing
// is sent when that leaves nothing to do. The connection then goes back
// to the pool; on any error (a failing statement, a COMMIT that did not
// commit, a transaction aborted by an earlier statement or ended by its
// own Commit or Rollback) nothing is committed by EndReserved and the
// connection is closed instead, which ends the transaction and every
// session state on the server. The errors wrap pgx.ErrTxCommitRollback
// or pgx.ErrTxClosed where pgx has one; database errors are translated.
//
// Once EndReserved has been called, the transaction, its savepoints and
// its large objects report pgx.ErrTxClosed: none of them reaches the
// connection, which may be running another transaction by then. (Large
// objects are pgx's own, bound to pgx's transaction: when they were taken,
// that transaction is ended by pgx's Commit or Rollback, a round trip of
// its own.)
func (d *driver) EndReserved(ctx context.Context, tx pgx.Tx, commit bool, before, after []store.Stmt) error {
	t, ok := tx.(*reservedTx)
	if !ok || t.d != d {
		return fmt.Errorf("pgxstore: EndReserved of a transaction BeginReserved did not start: %w", pgx.ErrTxClosed)
	}
	if !t.gone.CompareAndSwap(false, true) {
		return fmt.Errorf("pgxstore: EndReserved called twice: %w", pgx.ErrTxClosed)
	}
	conn := t.c.Conn()
	discard := func(err error) error {
		_ = conn.Close(context.WithoutCancel(ctx))
		t.c.Release()
		return err
	}
	open := (t.tx != nil || t.begun) && !t.ended
	switch {
	case conn.PgConn().IsBusy():
		// Rows of a statement still open: nothing else can be sent, and
		// closing the connection rolls the transaction back.
		if !commit {
			return discard(nil)
		}
		return discard(fmt.Errorf("pgxstore: EndReserved while the rows of a statement are still open (close them first); rolled back: %w", pgx.ErrTxCommitRollback))
	case t.stale && !commit:
		// The first statement met a plan the schema made stale
		// (noteStale): closing the connection rolls back and drops the
		// statement, so the next connection prepares it afresh. (A
		// commit is refused below: the statement failed, so the
		// transaction is aborted or closed.)
		return discard(nil)
	case commit && t.ended:
		return discard(fmt.Errorf("pgxstore: the transaction was ended by a Commit or Rollback of its own; nothing committed: %w", pgx.ErrTxClosed))
	case commit && open && conn.PgConn().TxStatus() != 'T':
		return discard(fmt.Errorf("pgxstore: the transaction was aborted by an earlier failed statement, rolled back: %w", pgx.ErrTxCommitRollback))
	}
	if t.lo && open {
		// pgx's LargeObjects reach pgx's transaction itself, which
		// knows it is over only when its own Commit or Rollback ends
		// it: end it that way (a round trip more, for before, on this
		// rare path), so that large objects kept past EndReserved
		// report pgx.ErrTxClosed instead of running in whatever
		// transaction the pooled connection is in next.
		var err error
		if commit {
			if len(before) > 0 {
				_, err = d.sendList(ctx, conn, before, -1)
			}
			if err == nil {
				err = t.tx.Commit(ctx)
			}
		} else if err = t.tx.Rollback(ctx); errors.Is(err, pgx.ErrTxClosed) {
			err = nil // BEGIN never ran: nothing to roll back
		}
		if err != nil {
			return discard(translate(err))
		}
		open, before = false, nil
	}
	// The whole list, in the order it is sent: [BEGIN,] before, COMMIT |
	// ROLLBACK, after.
	var room [maxPreparedList]store.Stmt
	list, commitAt := room[:0], -1
	committing := commit && (open || len(before) > 0)
	switch {
	case committing:
		if !open {
			list = append(list, store.Stmt{SQL: beginSQL})
		}
		list = append(list, before...)
		commitAt = len(list)
		list = append(list, store.Stmt{SQL: commitSQL})
	case open:
		list = append(list, store.Stmt{SQL: rollbackSQL})
	}
	list = append(list, after...)
	if len(list) == 0 {
		t.c.Release()
		return nil
	}
	tag, err := d.sendList(ctx, conn, list, commitAt)
	if err == nil && committing && tag.String() != "COMMIT" {
		err = fmt.Errorf("pgxstore: COMMIT answered %q: %w", tag.String(), pgx.ErrTxCommitRollback)
	}
	if err == nil && conn.PgConn().TxStatus() != 'I' {
		err = fmt.Errorf("pgxstore: still in a transaction after EndReserved: %w", pgx.ErrTxCommitRollback)
	}
	if err != nil {
		return discard(translate(err))
	}
	t.c.Release()
	return nil
}

// sendList prepares list on conn and runs it in one round trip, a pgconn
// batch of prepared statements or a pgx.Batch, and returns the command tag
// of list[commitAt] (commitAt < 0: none), which must be commitSQL.
func (d *driver) sendList(ctx context.Context, conn *pgx.Conn, list []store.Stmt, commitAt int) (pgconn.CommandTag, error) {
	if err := d.prepareStmts(ctx, conn, list); err != nil {
		return pgconn.CommandTag{}, err
	}
	sent, tag, err := d.sendPrepared(ctx, conn, list, commitAt, nil)
	if !sent && err == nil {
		b := &pgx.Batch{}
		for i := range list {
			if i == commitAt {
				b.Queue(commitSQL).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
				continue
			}
			queueStmts(b, list[i:i+1], nil)
		}
		err = conn.SendBatch(ctx, b).Close()
	}
	return tag, err
}

// reservedTx is the transaction of BeginReserved on its reserved
// connection: nothing is sent until its first statement, which carries
// BEGIN with it. pgx's own transaction (from pgx.Batch.BeginTx, or adopted
// by adoptTx after execFirst or queryFirst) runs every statement after
// that. pgx's transaction does not know when EndReserved ends it, so it is
// handed out only inside its LargeObjects (which make EndReserved end it
// through pgx): savepoints are savepointTx on it, whose statements are checked against gone,
// so that nothing of the transaction keeps working on the connection after
// EndReserved returned it to the pool. Like any pgx.Tx it is not for
// concurrent use.
type reservedTx struct {
	d     *driver
	c     *pgxpool.Conn
	tx    pgx.Tx // nil until begun, or until needed after a first statement
	begun bool   // execFirst or queryFirst sent BEGIN; tx is adopted when needed
	ended bool   // ended by its own Commit or Rollback
	// gone: EndReserved ran, the connection is no longer ours. Atomic,
	// for a savepoint a goroutine kept past EndReserved.
	gone atomic.Bool
	lo   bool  // LargeObjects handed out: they reach tx directly, so EndReserved ends it through pgx
	sp   int64 // savepoints begun, for their names
	// stale: the handler's statement prepared by execFirst or queryFirst
	// no longer matches the schema; EndReserved closes the connection so
	// that the next one prepares it afresh.
	stale bool
}

var _ pgx.Tx = (*reservedTx)(nil)

// lazyArgs reports whether a statement with args can travel in a batch
// with BEGIN: pgx batches take no per-query options but a QueryRewriter.
func lazyArgs(args []any) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// live returns pgx's transaction: adopted (no round trip) after execFirst
// or queryFirst began it, or begun with a BEGIN of its own if no statement
// has yet.
func (t *reservedTx) live(ctx context.Context) (pgx.Tx, error) {
	switch {
	case t.gone.Load():
		return closedTx, nil
	case t.tx != nil:
		return t.tx, nil
	case t.ended:
		return closedTx, nil
	case t.begun:
		t.tx = adoptTx(ctx, t.c.Conn())
		return t.tx, nil
	}
	conn := t.c.Conn()
	if err := t.d.prepare(ctx, conn, beginSQL); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: beginSQL})
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	err := br.Close()
	t.tx = tx // closed by pgx when BEGIN failed: no statement runs outside the transaction
	return tx, err
}

// first reports whether the next statement, with args, begins the
// transaction in its own batch.
func (t *reservedTx) first(args []any) bool {
	return !t.gone.Load() && t.tx == nil && !t.begun && !t.ended && lazyArgs(args)
}

// execFirst runs sql with BEGIN in one round trip through sendPrepared
// (pgconn's batch of statements prepared by name) instead of a pgx.Batch,
// whose pipeline costs about 20 allocations more per request. pgx's
// transaction is adopted only when a later statement needs it.
//
// ok=false, with nothing sent, and sendFirst runs sql as before, when: the
// connection has a tracer (which must see the statements) or another exec
// mode; args start with a QueryRewriter; the room for handlers'
// statements is full; the server will not prepare sql (the name of a
// statement the service prepared itself, several statements, a mistake:
// pgx's batch then runs it, or reports its error, as it always did); or
// the arguments cannot be encoded. Once sent, a batch that failed before
// BEGIN ran leaves the transaction closed, as a pgx.Batch does, so that
// nothing runs outside it.
func (t *reservedTx) execFirst(ctx context.Context, sql string, args []any) (ok bool, tag pgconn.CommandTag, err error) {
	if t.prepareFirst(ctx, sql, args) == nil {
		return false, tag, nil
	}
	d, conn := t.d, t.c.Conn()
	stmts := [2]store.Stmt{{SQL: beginSQL}, {SQL: sql, Args: args}}
	sent, tag, err := d.sendPrepared(ctx, conn, stmts[:], 1, nil)
	if !sent {
		return false, tag, nil
	}
	if conn.PgConn().TxStatus() == 'I' {
		t.tx = closedTx
	} else {
		t.begun = true
	}
	t.noteStale(err)
	return true, tag, err
}

// prepareFirst prepares a handler's first statement under its idem name
// on the reserved connection and returns its description, or nil, with
// nothing else sent, when execFirst and queryFirst do not apply: a tracer
// or another exec mode, a QueryRewriter, the handlers' room full, or a
// statement the server refuses to prepare (remembered by refuseHandler).
func (t *reservedTx) prepareFirst(ctx context.Context, sql string, args []any) *pgconn.StatementDescription {
	d := t.d
	if d.traced || d.mode != pgx.QueryExecModeCacheStatement || rewrites(args) {
		return nil
	}
	name := d.handlerName(sql)
	if name == "" {
		return nil
	}
	sd, err := t.c.Conn().Prepare(ctx, name, sql)
	if err != nil {
		var refused *pgconn.PgError
		if errors.As(err, &refused) {
			d.refuseHandler(sql)
		}
		return nil
	}
	return sd
}

// noteStale marks the transaction stale when err says the handler's
// statement that execFirst or queryFirst prepared no longer fits the
// schema ("cached plan must not change result type", 0A000) or is gone from
// the session (26000).
func (t *reservedTx) noteStale(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "0A000" || pe.Code == "26000") {
		t.stale = true
	}
}

// adoptTx returns pgx's transaction for the one conn is already in (begun
// by execFirst or queryFirst): a pgx.Batch that begins a transaction but
// holds no query sends nothing, and pgx.Conn.SendBatch still returns the
// transaction, so that commits, rollbacks, savepoints and large objects
// are pgx's own.
// TestReservedAdoptedTransaction holds pgx to this (the round trips of the
// statement after the first, and what the transaction commits).
func adoptTx(ctx context.Context, conn *pgx.Conn) pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: beginSQL})
	b.QueuedQueries = b.QueuedQueries[:0]
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	_ = br.Close()
	if tx == nil {
		// Not the pgx this was written for: a closed transaction never
		// commits, and EndReserved closes the connection.
		return closedTx
	}
	return tx
}

// sendFirst sends BEGIN and sql in one batch and returns the results with
// BEGIN's read: the transaction's first round trip.
func (t *reservedTx) sendFirst(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	conn := t.c.Conn()
	if err := t.d.prepare(ctx, conn, beginSQL); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: beginSQL})
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// Exec runs sql, with BEGIN in the same round trip when it is the first.
func (t *reservedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.first(args) {
		tx, err := t.live(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return tx.Exec(ctx, sql, args...)
	}
	if ok, tag, err := t.execFirst(ctx, sql, args); ok {
		return tag, err
	}
	br, err := t.sendFirst(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs sql, with BEGIN in the same round trip when it is the first.
func (t *reservedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.first(args) {
		tx, err := t.live(ctx)
		if err != nil {
			return errRows(err), err
		}
		return tx.Query(ctx, sql, args...)
	}
	if ok, rows, err := t.queryFirst(ctx, sql, args); ok {
		if rows == nil {
			return errRows(err), err
		}
		return rows, err
	}
	br, err := t.sendFirst(ctx, sql, args)
	if err != nil {
		return errRows(err), err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &firstRows{Rows: rows, end: br.Close, conn: t.c.Conn()}, nil
}

// errRows returns pgx's closed rows that report err, as pgx.Conn.Query
// returns them: a failed Query never returns nil rows.
func errRows(err error) pgx.Rows {
	rows, _ := pgx.FailedBatchResults(&pgx.Batch{}, err).Query()
	return rows
}

// queryFirst is execFirst for Query (and QueryRow): BEGIN and sql go in one
// pgconn batch of prepared statements, the rows are read from the batch's
// second result, and the batch's end is read when they are closed. ok=false,
// with nothing sent, in execFirst's cases.
func (t *reservedTx) queryFirst(ctx context.Context, sql string, args []any) (ok bool, rows pgx.Rows, err error) {
	sd := t.prepareFirst(ctx, sql, args)
	if sd == nil {
		return false, nil, nil
	}
	d, conn := t.d, t.c.Conn()
	begin, err := d.describe(ctx, conn, beginSQL)
	if err != nil || begin == nil {
		return false, nil, nil
	}
	m := conn.TypeMap()
	var b pgconn.Batch
	b.ExecStatement(begin, nil, nil, nil)
	eqb := eqbPool.Get().(*pgx.ExtendedQueryBuilder)
	err = eqb.Build(m, sd, args)
	if err == nil {
		// Bind is encoded into the batch's buffer here, so eqb's buffers
		// are free after it; the result formats are kept by reference
		// until the batch is read (ownFormats).
		b.ExecStatement(sd, eqb.ParamValues, eqb.ParamFormats, ownFormats(eqb.ResultFormats))
	}
	eqbPool.Put(eqb)
	if err != nil {
		return false, nil, nil // pgx's batch reports the arguments' error
	}
	mrr := conn.PgConn().ExecBatch(ctx, &b)
	t.begun = true
	end := func() error {
		err := mrr.Close()
		if conn.PgConn().TxStatus() == 'I' {
			t.begun, t.tx = false, closedTx
		}
		t.noteStale(err)
		return err
	}
	if !mrr.NextResult() {
		err := end()
		if err == nil {
			err = errors.New("pgxstore: the server answered nothing to BEGIN")
		}
		return true, nil, err
	}
	if _, err := mrr.ResultReader().Close(); err != nil {
		_ = end()
		return true, nil, err
	}
	if !mrr.NextResult() {
		err := end()
		if err == nil {
			err = errors.New("pgxstore: the server answered nothing to the statement")
		}
		return true, nil, err
	}
	rr := pgx.RowsFromResultReader(m, mrr.ResultReader())
	// end's mrr.Close reports the statement's error too, for noteStale.
	// pgx.RowsFromResultReader's rows have no connection: firstRows
	// answers Conn.
	return true, &firstRows{Rows: rr, end: end, conn: conn}, nil
}

// QueryRow runs sql like Query and returns its first row.
func (t *reservedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.first(args) {
		tx, err := t.live(ctx)
		if err != nil {
			return errRow{err}
		}
		return tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		rows.Close() // Query never returns nil rows
		return errRow{err}
	}
	return firstRow{rows}
}

// Commit commits the statements run so far (none: nothing to do). The
// connection stays reserved until EndReserved.
func (t *reservedTx) Commit(ctx context.Context) error { return t.end(ctx, true) }

// Rollback rolls back the statements run so far. The connection stays
// reserved until EndReserved.
func (t *reservedTx) Rollback(ctx context.Context) error { return t.end(ctx, false) }

func (t *reservedTx) end(ctx context.Context, commit bool) error {
	if t.gone.Load() || t.ended {
		return pgx.ErrTxClosed
	}
	if t.tx == nil && t.begun {
		t.tx = adoptTx(ctx, t.c.Conn())
	}
	t.ended = true
	if t.tx == nil {
		return nil
	}
	if commit {
		return t.tx.Commit(ctx)
	}
	return t.tx.Rollback(ctx)
}

// Begin starts a pseudo nested transaction on a savepoint, as pgx does,
// beginning the transaction first if needed. Unlike pgx's, the savepoint
// runs its statements through t, so it reports pgx.ErrTxClosed once
// EndReserved has returned the connection to the pool.
func (t *reservedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.live(ctx)
	if err != nil {
		return nil, err
	}
	t.sp++
	return beginSavepoint(ctx, tx, t, t.sp)
}

func (t *reservedTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.live(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, cols, src)
}

func (t *reservedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.live(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return tx.SendBatch(ctx, b)
}

// LargeObjects begins the transaction (without a context: it has none)
// and returns pgx's LargeObjects of it. pgx offers no way to build them on
// another Tx, so they use pgx's transaction directly; taking them makes
// EndReserved end that transaction through pgx's own Commit or Rollback,
// so that they stop working with it.
func (t *reservedTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.live(context.Background())
	if err != nil || tx == closedTx {
		return closedTx.LargeObjects()
	}
	t.lo = true
	return tx.LargeObjects()
}

func (t *reservedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.live(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// Conn begins the transaction (so that statements run on the connection
// are inside it) and returns the connection.
func (t *reservedTx) Conn() *pgx.Conn {
	_, _ = t.live(context.Background())
	return t.c.Conn()
}

// firstRows are the rows of a statement sent with BEGIN: the batch is
// closed (its Sync read) once the rows are: a pgx.Batch's results
// (sendFirst) or a pgconn batch (queryFirst).
type firstRows struct {
	pgx.Rows
	end    func() error // reads the rest of the batch, once
	conn   *pgx.Conn
	closed bool
	err    error
}

// Conn returns the reserved connection the rows are read from.
func (r *firstRows) Conn() *pgx.Conn { return r.conn }

func (r *firstRows) finish() {
	if !r.closed {
		r.closed = true
		r.err = r.end()
	}
}

func (r *firstRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *firstRows) Close() {
	r.Rows.Close()
	r.finish()
}

func (r *firstRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow's row over firstRows, with pgx's semantics.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error {
	defer r.rows.Close()
	for _, d := range dest {
		// As pgx's QueryRow: the bytes would point into a buffer that
		// closing the rows (and reading the batch's end) reuses.
		if _, ok := d.(*pgtype.DriverBytes); ok {
			return errors.New("cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
