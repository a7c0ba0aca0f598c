package idemhttp

import (
	"context"
	"net/http"

	"github.com/idemkit/idem/store"
)

// The single-write transactional path on SQLite, whose write transactions
// (BEGIN IMMEDIATE, see package sqlstore) are serialised: after peek found
// no record,
//
//  1. BEGIN IMMEDIATE and a read of the record inside the transaction: no
//     other writer runs until it ends, so the read decides. A record
//     committed since peek (a concurrent duplicate that finished first)
//     is answered from it, after a ROLLBACK;
//  2. no record: the handler runs on the transaction;
//  3. the completed record, ONE INSERT (HTTPKeys.InsertCompleted, no ON
//     CONFLICT), and COMMIT.
//
// One write of the key record where the ordinary path writes two (an
// in_progress claim, then the completion UPDATE). The primary key still
// decides: a record written by a writer that bypassed BEGIN IMMEDIATE
// makes the INSERT a unique violation, nothing commits, and the request is
// answered from that record. A crash leaves nothing: the transaction never
// committed. Records this path does not decide (expired ones, abandoned
// two-phase leases) go to the ordinary path, which takes them over fenced
// by their token.

// serialised reports whether the single-write path applies.
func (m *Middleware[TTx]) serialised() bool {
	return m.cfg.Mode == Transactional && m.d.Dialect() == store.SQLite && m.q.InsertCompleted != ""
}

// attemptSerialised is one attempt on the single-write path. outExecute
// means it did not decide (a record the ordinary path must take over).
func (m *Middleware[TTx]) attemptSerialised(w http.ResponseWriter, r *http.Request, h http.Handler, req *request) (outcome, *Record, error) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	// The transaction follows the client's context only until the handler
	// returns; after that the work is recorded and committed even if the
	// client left.
	txCtx, handlerReturned, cancelTx := untilHandlerReturns(ctx)
	defer cancelTx()
	start := m.cfg.Now()
	tx, err := m.d.Begin(txCtx)
	if err != nil {
		return errOutcome(err), nil, err
	}
	rec, found, err := load(txCtx, m.d.Tx(tx), m.q, req.scope)
	if err != nil || found {
		_ = m.d.Rollback(bg, tx)
		if err != nil {
			return outStoreFailed, nil, err
		}
		return m.decideReserved(rec, req)
	}
	return m.runAndInsert(w, r, h, req, tx, start, handlerReturned, func(args []any) error {
		if args == nil {
			return m.d.Rollback(bg, tx)
		}
		if _, err := m.d.Tx(tx).Exec(bg, m.q.InsertCompleted, args...); err != nil {
			_ = m.d.Rollback(bg, tx)
			return err
		}
		if err := m.d.Commit(bg, tx); err != nil {
			_ = m.d.Rollback(bg, tx)
			return err
		}
		return nil
	})
}
