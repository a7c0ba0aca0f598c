package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/store"
)

// The pipelined transactional path (PostgreSQL through pgx: the driver's
// BeginReserved/EndReserved), in the round trips of a plain handler:
//
//  1. the key's session advisory lock and the read of its record, ONE
//     statement (HTTPKeys.LockKey, which releases the lock when a record
//     exists), one round trip on a reserved connection. A completed
//     record is replayed from this read alone (or answers 422), a live
//     two-phase one 409: the whole answer is one statement;
//  2. no record: the handler runs on a transaction of that connection
//     whose BEGIN travels with the handler's first statement;
//  3. the completed record (HTTPKeys.InsertCompleted, a plain INSERT), COMMIT
//     and the lock's release (HTTPKeys.Unlock), one round trip: the lock
//     is released only after the COMMIT made the record visible.
//
// The lock serialises executions of one key: a concurrent duplicate waits
// in its step 1 (at most Config.LockTimeout, then 409) and its read, a
// query whose snapshot is taken after the lock is granted, sees the
// committed record and replays it. That holds under READ COMMITTED only
// (a new snapshot per query), so the path is used only where the pool's
// sessions begin transactions so (readCommitted). The lock is not what decides: the primary key
// is. InsertCompleted has no ON CONFLICT, so a record written meanwhile by
// a writer that does not take the lock (a two-phase middleware on the same
// keys, an older version of idem, an operator) makes it fail with a unique
// violation: nothing commits, the handler's work is rolled back with it,
// and the request is answered from that record. Process death anywhere
// ends the session: the server rolls the transaction back and drops the
// lock. Records this path does not decide (expired ones, abandoned
// two-phase leases) go to the ordinary path, where claim takes them over
// fenced by their token.
//
// The ordinary path must take the key's lock too while this path is in
// use (beginLocked): its claim is an INSERT or a takeover that stays
// uncommitted while its handler runs, which LockKey's read cannot see. A
// record read as expired here may be gone (idem gc, Forget) by the time
// the ordinary path inserts, and a duplicate whose LockKey then found no
// record would take the free lock and run the handler a second time. With
// the ordinary path holding the lock for its transaction, that duplicate
// waits for its commit and replays, as it would behind this path; and a
// request that reaches the ordinary path while this one holds the key
// waits for its record instead of inserting its own.

// reserved reports whether the pipelined transactional path applies: not
// with Config.NoSessionLock, whose session lock a transaction-pooling
// proxy would not keep on one server connection.
func (m *Middleware[TTx]) reserved() bool {
	return m.cfg.Mode == Transactional && !m.cfg.NoSessionLock && m.q.LockKey != "" && m.d.SupportsPipeline()
}

// What Middleware.iso knows of the pool's default transaction isolation.
const (
	isoUnknown       int32 = iota // not asked yet, or the question failed
	isoReadCommitted              // read committed: the reserved path is used
	isoOther                      // repeatable read or serializable: it is not
)

// defaultIsolationSQL reads the isolation level the session begins its
// transactions with (and its implicit ones: LockKey's).
const defaultIsolationSQL = `SELECT current_setting('default_transaction_isolation')`

// reservedInUse reports whether requests take the reserved path: it
// applies, and readCommitted said yes.
func (m *Middleware[TTx]) reservedInUse() bool {
	return m.reserved() && m.iso.Load() == isoReadCommitted
}

// readCommitted reports whether the pool's sessions begin transactions
// READ COMMITTED (or READ UNCOMMITTED, which PostgreSQL runs as READ
// COMMITTED), which LockKey relies on: after waiting for the key's lock it
// reads the record again in a query of its own, and only under READ
// COMMITTED does that query take a new snapshot and see the record the
// previous holder committed. Under REPEATABLE READ or SERIALIZABLE (a
// default_transaction_isolation set for the role, the database or the
// pool's connections) it would read the snapshot of the statement's start,
// find no record, and run the handler a second time; the ordinary path,
// whose claim waits on the primary key, is used instead.
//
// The pool is asked once, on one of its connections, by the first request
// that would take the reserved path (a round trip for that request alone);
// when the question fails, that request takes the ordinary path and the
// next one asks again.
func (m *Middleware[TTx]) readCommitted(ctx context.Context) bool {
	switch m.iso.Load() {
	case isoReadCommitted:
		return true
	case isoOther:
		return false
	}
	var level string
	if err := m.d.Pool().QueryRow(ctx, defaultIsolationSQL).Scan(&level); err != nil {
		return false
	}
	if level == "read committed" || level == "read uncommitted" {
		m.iso.Store(isoReadCommitted)
		return true
	}
	if m.iso.CompareAndSwap(isoUnknown, isoOther) {
		m.log.WarnContext(ctx, "the pool's transactions are not read committed: idempotent requests take the ordinary transactional path, not the pipelined one",
			"default_transaction_isolation", level)
	}
	return false
}

// lockXactSQL takes the advisory lock $1 (lockKey) for the rest of the
// transaction, the one LockKey takes for the session: the two exclude each
// other. The wait, only when another session holds the lock, is bounded by
// $2 (lock_timeout, Config.LockTimeout: 55P03, store.ErrLockTimeout, when
// it runs out); the transaction's own lock_timeout is back once the lock is
// granted, for the statements after it. The CTEs run in order: lk reads
// lt (the timeout set), and the restore reads lk (the lock granted).
const lockXactSQL = `WITH lt AS (
  SELECT current_setting('lock_timeout') AS prev, set_config('lock_timeout', $2::text, true) AS cur
), lk AS (
  SELECT pg_advisory_xact_lock($1::bigint) AS granted FROM lt
)
SELECT set_config('lock_timeout', lt.prev, true) FROM lt, lk`

// beginLocked begins the ordinary path's transaction with the key's lock
// (lockXactSQL) while the reserved path is in use, BEGIN and the lock in
// one round trip (store.Driver.BeginInsert runs any one statement after
// BEGIN; this one inserts nothing). locked=false (nil error) means the
// driver declined the one round trip (a statement it had prepared was
// dropped, say): the caller then begins and locks in two
// (beginThenLock). The lock is released by the transaction's COMMIT or
// ROLLBACK.
func (m *Middleware[TTx]) beginLocked(ctx context.Context, req *request) (tx TTx, locked bool, err error) {
	tx, ran, ok, err := m.d.BeginInsert(ctx, lockXactSQL, lockKey(req.scope), m.lockTO)
	if err != nil || !ok || !ran {
		return tx, false, err
	}
	return tx, true, nil
}

// beginThenLock is beginLocked in two round trips, for a driver that
// declined the one: BEGIN, then lockXactSQL in the transaction. On an
// error the transaction is rolled back.
func (m *Middleware[TTx]) beginThenLock(ctx context.Context, req *request) (TTx, error) {
	tx, err := m.d.Begin(ctx)
	if err != nil {
		return tx, err
	}
	if _, err := m.d.Tx(tx).Exec(ctx, lockXactSQL, lockKey(req.scope), m.lockTO); err != nil {
		_ = m.d.Rollback(context.WithoutCancel(ctx), tx)
		var zero TTx
		return zero, err
	}
	return tx, nil
}

// lockKey is the advisory lock of a scope: FNV-1a (64 bits) of the tenant,
// operation and key, NUL-separated (none of them holds a NUL). Two scopes
// that collide only wait on each other; the primary key still decides.
func lockKey(s scope) int64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i, part := range [...]string{"idemhttp", s.tenant, s.operation, s.key} {
		if i > 0 {
			h *= prime // a NUL byte: h ^ 0 is h
		}
		for j := 0; j < len(part); j++ {
			h = (h ^ uint64(part[j])) * prime
		}
	}
	return int64(h)
}

// attemptReserved is one attempt on the pipelined transactional path.
// outExecute means it did not decide (no such ability, sessions that are
// not read committed, or a record the ordinary path must take over).
func (m *Middleware[TTx]) attemptReserved(w http.ResponseWriter, r *http.Request, h http.Handler, req *request) (outcome, *Record, error) {
	ctx := r.Context()
	if !m.readCommitted(ctx) {
		return outExecute, nil, nil
	}
	bg := context.WithoutCancel(ctx)
	lk := lockKey(req.scope)
	var rec *Record
	lockArgs := req.args(lk, m.lockTO)
	read, unlock, insert := req.stmtRoom[0:1:1], req.stmtRoom[1:2:2], req.stmtRoom[2:3:3]
	read[0] = store.Stmt{SQL: m.q.LockKey, Args: lockArgs, Rows: func(rows store.Rows) error {
		if !rows.Next() {
			return nil
		}
		rec = &req.recRoom
		*rec = Record{Tenant: req.tenant, Operation: req.operation, Key: req.key}
		return scanRecord(rows, rec)
	}}
	start := m.cfg.Now()
	tx, ok, err := m.d.BeginReserved(ctx, read)
	if err != nil {
		return errOutcome(err), nil, err
	}
	if !ok {
		return outExecute, nil, nil
	}
	if rec != nil { // the statement released the lock with the record
		if err := m.d.EndReserved(bg, tx, false, nil, nil); err != nil {
			return outStoreFailed, nil, err
		}
		return m.decideReserved(rec, req)
	}
	// The lock's key, boxed once already among the lock's arguments.
	unlock[0] = store.Stmt{SQL: m.q.Unlock, Args: lockArgs[3:4:4]}
	return m.runAndInsert(w, r, h, req, tx, start, nil, func(args []any) error {
		if args == nil {
			return m.d.EndReserved(bg, tx, false, nil, unlock)
		}
		insert[0] = store.Stmt{SQL: m.q.InsertCompleted, Args: args}
		return m.d.EndReserved(bg, tx, true, insert, unlock)
	})
}

// runAndInsert runs h on tx, a transaction in which the key has no record
// and no other execution of it can start (it holds the key's lock, or
// writers are serialised), and ends tx through end: end(nil) rolls it
// back (a panic, an unrecordable response or a status not stored), end
// with HTTPKeys.InsertCompleted's arguments inserts the completed record
// and commits. handlerDone, when not nil, runs once the handler returned.
// start is when the execution started (created_at).
func (m *Middleware[TTx]) runAndInsert(w http.ResponseWriter, r *http.Request, h http.Handler, req *request, tx TTx,
	start time.Time, handlerDone func(), end func(args []any) error) (outcome, *Record, error) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	finished := false
	defer func() {
		if !finished { // the handler panicked: roll back, release the lock
			_ = end(nil)
		}
	}()
	cw := m.newCapture(w)
	defer cw.close()
	m.runOnTx(cw, r, h, req, tx) // a panic propagates; the deferred end runs
	if handlerDone != nil {
		handlerDone()
	}
	cw.finish()
	if failure := cw.failure(); failure != nil || !m.cfg.StoreStatus(cw.status) {
		finished = true
		if err := end(nil); err != nil {
			m.log.WarnContext(ctx, "rollback failed", "idempotency_key", req.key, "error", err)
		}
		if failure != nil {
			return m.unrecordable(w, r, req, failure)
		}
		cw.send()
		return outDone, nil, nil
	}
	// The handler finished: record and commit even if the client has gone
	// meanwhile, so its retry replays instead of executing again.
	res, err := m.storedResponse(req, cw)
	if err != nil {
		finished = true
		_ = end(nil)
		return outStoreFailed, nil, err
	}
	args := req.args(req.fp.Bytes(), res.status, res.headers, res.body, res.omitted, res.resourceType, res.resourceID,
		store.Micros(start), store.Micros(m.cfg.Now()), store.Micros(start.Add(m.retention(req.operation))))
	finished = true
	err = end(args)
	if errors.Is(err, store.ErrUniqueViolation) {
		// Nothing committed. If a writer that does not take the lock
		// recorded the key meanwhile, its record answers; otherwise the
		// violation was the handler's own (a deferred constraint).
		rec, found, lerr := load(bg, m.d.Pool(), m.q, req.scope)
		if lerr == nil && found {
			m.log.InfoContext(ctx, "key recorded concurrently by a writer without the lock; handler's work rolled back",
				"idempotency_key", req.key, "tenant", req.tenant, "operation", req.operation)
			return m.decideReserved(rec, req)
		}
	}
	if err != nil {
		return outStoreFailed, nil, fmt.Errorf("commit failed, nothing was recorded: %w", err)
	}
	cw.send()
	return outDone, nil, nil
}

// decideReserved is the answer to an existing record read on the
// pipelined path; outExecute sends the request to the ordinary path (an
// expired record to take over, an abandoned lease to hold).
func (m *Middleware[TTx]) decideReserved(rec *Record, req *request) (outcome, *Record, error) {
	switch d := m.decide(rec, req.fp, m.cfg.Now()); {
	case d == lease.Acquire, d == lease.Held && rec.State == StateInProgress:
		return outExecute, nil, nil
	default:
		return outcomeOf(d), rec, nil
	}
}
