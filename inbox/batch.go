package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/panics"
	"github.com/idemkit/idem/store"
)

// Outcome is the result of one message of a batch: Result when Err is nil.
type Outcome struct {
	Result Result
	// Err is the handler's error, a validation error or a fingerprint
	// mismatch for this message. The message's effect and inbox record were
	// rolled back (to its savepoint); the other messages are unaffected.
	Err error
}

// ProcessBatchTx records a batch of messages for consumer inside tx with one
// multi-row insert (… ON CONFLICT DO NOTHING RETURNING) and runs h for each
// new message, in the batch's order, each inside its own savepoint: a
// failing message is rolled back to its savepoint and its inbox record
// removed, so it is not recorded and its redelivery is processed, while the
// other messages commit with tx.
//
// To save round trips, the handlers first run together under one savepoint;
// only when one of them fails is that pass rolled back and replayed with a
// savepoint per message. A handler may therefore run twice inside tx, the
// first run's writes rolled back: handlers must keep their effects in tx
// (external effects are scheduled through the effect ledger, not performed
// inside the transaction). Handlers that write with Exec instead of
// running their statements on tx themselves save the pass a round trip per
// statement: the pass sends them all with its savepoint's release.
//
// The returned slice has one Outcome per message, in order. A message id
// repeated within the batch is processed once; its later copies are
// Duplicate (or a fingerprint mismatch). A dead-letter redrive or revision
// for another consumer (its broker.HeaderRedriveFor names another than
// consumer) is Duplicate: not recorded, its handler not run. A handler's panic is recovered,
// logged with its stack, and is its message's failure: that Outcome.Err is
// an *idem.PanicError (errors.Is idem.ErrPanic, class "panic"). The error
// return is for failures of the transaction itself; then the caller must roll tx back and retry the
// whole batch (or its messages one by one).
//
// A handler error matching store.ErrSerialization (a PostgreSQL deadlock or
// serialization failure) is such a failure of the transaction, not of its
// message: it is returned at once. Rolling back only to the message's
// savepoint would keep every lock the batch took before it, so the other
// transaction of the deadlock would stay blocked behind this one while each
// further message needing its rows waited out the deadlock timeout and
// failed in turn. Acknowledge each delivery whose Outcome has no error after
// tx commits; Nak or dead-letter the others.
func (in *Inbox[TTx]) ProcessBatchTx(ctx context.Context, tx TTx, consumer string, msgs []idem.Message, h Handler[TTx]) ([]Outcome, error) {
	return in.processBatch(ctx, tx, consumer, msgs, nil, h)
}

// BatchHandler applies the effects of several new messages at once with
// tx, typically one multi-row statement or COPY instead of a round trip per
// message. It receives the messages in batch order. An error rolls back
// everything it wrote.
type BatchHandler[TTx any] func(ctx context.Context, tx TTx, msgs []idem.Message) error

// ProcessBatchWithTx is ProcessBatchTx for handlers that can apply a whole
// batch at once: the new messages of the batch (duplicates and invalid
// messages removed) are handed to bh in one call. If bh fails, its writes
// are rolled back to a savepoint and each new message is applied through h
// in a savepoint of its own, exactly as ProcessBatchTx does, so one poison
// message still cannot sink the others. Both handlers must have the same
// effect for a message. A bh writing with Exec has its statement sent
// together with the release of the pass's savepoint.
func (in *Inbox[TTx]) ProcessBatchWithTx(ctx context.Context, tx TTx, consumer string, msgs []idem.Message, bh BatchHandler[TTx], h Handler[TTx]) ([]Outcome, error) {
	if bh == nil {
		return nil, checks.Optionf("inbox: nil batch handler")
	}
	return in.processBatch(ctx, tx, consumer, msgs, bh, h)
}

func (in *Inbox[TTx]) processBatch(ctx context.Context, tx TTx, consumer string, msgs []idem.Message, bh BatchHandler[TTx], h Handler[TTx]) ([]Outcome, error) {
	if h == nil {
		return nil, checks.Optionf("inbox: nil handler")
	}
	if err := checks.ID(consumer); err != nil {
		return nil, fmt.Errorf("inbox: consumer: %w", err)
	}
	h = in.recovering(consumer, h)
	if bh != nil {
		bh = in.recoveringBatch(consumer, bh)
	}
	out := make([]Outcome, len(msgs))
	fps := make([]idem.Fingerprint, len(msgs))
	first := make(map[string]int, len(msgs)) // message id → index of its first copy
	skip := make([]bool, len(msgs))          // a redrive for another consumer
	var ids []string
	for i, m := range msgs {
		if in.forOther(ctx, consumer, m) {
			skip[i], out[i].Result = true, Duplicate
			continue
		}
		if err := validate(consumer, m); err != nil {
			out[i].Err = err
			continue
		}
		fps[i] = m.Fingerprint()
		if _, seen := first[m.ID]; !seen {
			first[m.ID] = i
			ids = append(ids, m.ID)
		}
	}
	// Insert in id order: two batches overlapping in ids lock them in the
	// same order and cannot deadlock.
	slices.Sort(ids)
	q := in.d.Tx(tx)
	now := in.cfg.Now()
	inserted := make(map[string]bool, len(ids))
	// The inserts and, when the fast pass below will likely run (more than
	// one message, or a BatchHandler), the opening of its savepoint go in
	// one batch: with a driver that pipelines (pgx) that is one round trip.
	//
	// With a driver that pipelines, the inserts first go without ON
	// CONFLICT under a savepoint of their own: an all-new batch (the
	// common case) is then recorded without the speculative insertion ON
	// CONFLICT pays per row. A batch holding a recorded message fails with
	// a unique violation, is rolled back to that savepoint and sent again
	// with ON CONFLICT: two more round trips, for redeliveries only. The
	// unique key decides either way.
	spOpen := len(ids) > 1 || (bh != nil && len(ids) == 1)
	build := func(strict bool) []store.Stmt {
		var stmts []store.Stmt
		if strict {
			stmts = append(stmts, store.Stmt{SQL: in.q.BatchStrictSavepoint})
		}
		for chunk := range slices.Chunk(ids, maxBatch) {
			args := make([]any, 0, 3+2*len(chunk))
			args = append(args, consumer, store.Micros(now), store.Micros(now.Add(in.retention(consumer))))
			for _, id := range chunk {
				args = append(args, id, fps[first[id]][:])
			}
			sql := in.q.BatchInsert
			if strict {
				sql = in.q.BatchInsertStrict
			}
			stmts = append(stmts, store.Stmt{SQL: sql(len(chunk)), Args: args, Rows: func(rows store.Rows) error {
				for rows.Next() {
					var id string
					if err := rows.Scan(&id); err != nil {
						return err
					}
					inserted[id] = true
				}
				return rows.Err()
			}})
		}
		if strict {
			stmts = append(stmts, store.Stmt{SQL: in.q.BatchStrictRelease})
		}
		if spOpen {
			stmts = append(stmts, store.Stmt{SQL: in.q.BatchSavepoint})
		}
		return stmts
	}
	strict := len(ids) > 0 && in.q.BatchInsertStrict != nil && in.d.SupportsPipeline()
	if stmts := build(strict); len(stmts) > 0 {
		err := in.d.SendBatch(ctx, q, stmts)
		if strict && errors.Is(err, store.ErrUniqueViolation) {
			// The rollback goes first on its own: a driver may prepare a
			// batch's statements before running any, which the aborted
			// transaction would refuse.
			clear(inserted)
			if _, err = q.Exec(ctx, in.q.BatchStrictRollback); err == nil {
				err = in.d.SendBatch(ctx, q, append([]store.Stmt{{SQL: in.q.BatchStrictRelease}}, build(false)...))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("inbox: batch insert: %w", err)
		}
	}
	// Read the records that were already there.
	var existing []string
	for _, id := range ids {
		if !inserted[id] {
			existing = append(existing, id)
		}
	}
	stored := make(map[string]record, len(existing))
	for chunk := range slices.Chunk(existing, maxBatch) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, consumer)
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := q.Query(ctx, in.q.BatchSelect(len(chunk)), args...)
		if err != nil {
			return nil, fmt.Errorf("inbox: batch read: %w", err)
		}
		for rows.Next() {
			var id string
			var r record
			if err := rows.Scan(&id, &r.fingerprint, &r.state); err != nil {
				rows.Close()
				return nil, err
			}
			stored[id] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: batch read: %w", err)
		}
	}

	// Fast path: run every new message's handler under one savepoint. If
	// they all succeed, that is one round trip for the savepoint instead of
	// one per message. If one fails, roll the whole pass back (the inbox
	// rows written above survive) and replay it below with a savepoint per
	// message, so only the failing messages are left out. Handlers are
	// transactional (external effects are only scheduled), so running one twice in a transaction whose
	// first pass was rolled back leaves one effect.
	fast := true
	var toRun []int
	for i, m := range msgs {
		if !skip[i] && out[i].Err == nil && first[m.ID] == i && inserted[m.ID] {
			toRun = append(toRun, i)
		}
	}
	if len(toRun) > 1 || (bh != nil && len(toRun) == 1) {
		if !spOpen {
			if _, err := q.Exec(ctx, in.q.BatchSavepoint); err != nil {
				return nil, fmt.Errorf("inbox: savepoint: %w", err)
			}
		}
		// The pass's handlers queue their Exec statements (see Exec): they
		// travel with the savepoint's release, one round trip for all.
		pctx, qu := withQueue(ctx, tx)
		var herr error
		if bh != nil {
			fresh := make([]idem.Message, len(toRun))
			for j, i := range toRun {
				fresh[j] = msgs[i]
			}
			herr = bh(pctx, tx, fresh)
		} else {
			for _, i := range toRun {
				if herr = h(pctx, tx, msgs[i]); herr != nil {
					break
				}
			}
		}
		if herr == nil {
			herr = qu.err // a Flush of the handlers failed
		}
		if herr = in.txFailure(herr); errors.Is(herr, store.ErrSerialization) {
			qu.closed = true
			return nil, fmt.Errorf("inbox: batch: %w", herr)
		}
		fast = herr == nil
		if fast {
			// The queued statements, then the release: a failing statement
			// makes the driver skip the release, so the pass is rolled back
			// to its savepoint below like a failing handler's.
			err := qu.flush(ctx, q, in.d.SendBatch, []store.Stmt{{SQL: in.q.BatchSavepointRelease}})
			if errors.Is(err, store.ErrSerialization) {
				qu.closed = true
				return nil, fmt.Errorf("inbox: batch: %w", err)
			}
			fast = err == nil
		}
		qu.closed = true
		if !fast {
			if _, err := q.Exec(ctx, in.q.BatchSavepointRollback); err != nil {
				return nil, fmt.Errorf("inbox: batch savepoint: %w", err)
			}
		}
		if fast {
			for _, i := range toRun {
				out[i].Result = Processed
			}
		}
	} else {
		fast = false
		if spOpen {
			// Duplicates left too few new messages for the fast pass.
			if _, err := q.Exec(ctx, in.q.BatchSavepointRelease); err != nil {
				return nil, fmt.Errorf("inbox: batch savepoint: %w", err)
			}
		}
	}

	// The replay runs every Exec at once, inside its message's savepoint.
	ctx = context.WithValue(ctx, queueKey{}, (*queue)(nil))
	sp := false // a per-message savepoint is open
	runInSavepoint := func(fn func() error) (error, error) {
		stmt := in.q.Savepoint
		if sp {
			stmt = in.q.SavepointNext
		}
		if _, err := q.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("inbox: savepoint: %w", err)
		}
		sp = true
		herr := fn()
		if herr != nil {
			if _, err := q.Exec(ctx, in.q.SavepointRollback); err != nil {
				return herr, fmt.Errorf("inbox: rollback to savepoint: %w", err)
			}
		}
		return herr, nil
	}
	for i, m := range msgs {
		if skip[i] || out[i].Err != nil {
			continue
		}
		if f := first[m.ID]; f != i {
			// A repeat within the batch.
			if err := fpmatch.Check(consumer+"/"+m.ID, fps[f][:], fps[i]); err != nil {
				out[i].Err = err
			} else {
				out[i].Result = Duplicate
			}
			continue
		}
		switch r, ok := stored[m.ID]; {
		case inserted[m.ID] && fast:
			// done in the fast pass
		case inserted[m.ID]:
			herr, err := runInSavepoint(func() error { return h(ctx, tx, m) })
			if err != nil {
				return nil, err
			}
			if herr = in.txFailure(herr); errors.Is(herr, store.ErrSerialization) {
				return nil, fmt.Errorf("inbox: batch: %w", herr)
			}
			if herr != nil {
				// The inbox row was written before the savepoint: remove it
				// so the message is not recorded.
				if _, err := q.Exec(ctx, in.q.Delete, consumer, m.ID); err != nil {
					return nil, fmt.Errorf("inbox: unrecord %s/%s: %w", consumer, m.ID, err)
				}
				out[i].Err = herr
				continue
			}
			out[i].Result = Processed
		case ok:
			if err := r.check(consumer, m.ID, fps[i]); err != nil {
				out[i].Err = err
				continue
			}
			out[i].Result = Duplicate
		default:
			// The conflicting row vanished between insert and read (rolled
			// back or deleted): take the single-message path.
			var res Result
			herr, err := runInSavepoint(func() error {
				var e error
				res, e = in.ProcessTx(ctx, tx, consumer, m, h)
				return e
			})
			if err != nil {
				return nil, err
			}
			if herr = in.txFailure(herr); errors.Is(herr, store.ErrSerialization) {
				return nil, fmt.Errorf("inbox: batch: %w", herr)
			}
			out[i] = Outcome{Result: res, Err: herr}
		}
	}
	if sp {
		if _, err := q.Exec(ctx, in.q.SavepointRelease); err != nil {
			return nil, fmt.Errorf("inbox: release savepoint: %w", err)
		}
	}
	return out, nil
}

// recoveringBatch returns bh with its panics recovered as
// *idem.PanicError, logged with their stack: the pass is then replayed
// message by message as after any error of bh.
func (in *Inbox[TTx]) recoveringBatch(consumer string, bh BatchHandler[TTx]) BatchHandler[TTx] {
	return func(ctx context.Context, tx TTx, msgs []idem.Message) error {
		return panics.Call(ctx, in.log, "batch handler panicked; its writes are rolled back and its messages applied one by one",
			func() error { return bh(ctx, tx, msgs) }, "consumer", consumer, "messages", len(msgs))
	}
}

// ProcessBatch runs ProcessBatchTx in a transaction of its own and commits
// it. On a transaction failure nothing is committed and the error is
// returned; per-message failures are in the outcomes.
func (in *Inbox[TTx]) ProcessBatch(ctx context.Context, consumer string, msgs []idem.Message, h Handler[TTx]) ([]Outcome, error) {
	var out []Outcome
	err := store.InTx(ctx, in.d, func(tx TTx) error {
		var err error
		out, err = in.ProcessBatchTx(ctx, tx, consumer, msgs, h)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// txFailure returns herr, a handler's error, as store.ErrSerialization when
// it is a failure of the whole transaction (a deadlock, a serialization
// failure) that the driver did not translate: a handler writing through the
// raw transaction gets the database's own error.
func (in *Inbox[TTx]) txFailure(herr error) error {
	if herr == nil || errors.Is(herr, store.ErrSerialization) {
		return herr
	}
	if t, ok := any(in.d).(store.ErrorTranslator); ok {
		if e := t.TranslateError(herr); errors.Is(e, store.ErrSerialization) {
			return e
		}
	}
	return herr
}
