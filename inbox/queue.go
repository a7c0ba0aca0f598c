package inbox

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/idemkit/idem/store"
)

// Exec runs one write statement of a handler on tx (sql a constant
// statement, args bound as parameters), sending it with the next round
// trip idem makes anyway when the handler runs inside a batch's fast pass
// (ProcessBatchTx, ProcessBatchWithTx, and consumer batches): there the
// statement is queued and sent, in queue order, together with the release
// of the pass's savepoint, so a batch of n handlers writing one row each
// costs one round trip for all their statements instead of n (with a
// driver that pipelines, pgx; others run the queue statement by statement
// at the same point). Anywhere else, outside a fast pass or on another
// transaction than the pass's, it runs the statement on tx at once.
//
// The guarantees do not change: the queued statements run in tx, before
// the batch's savepoint is released and so before the caller can commit;
// when one of them fails, the whole pass is rolled back to its savepoint
// and replayed message by message, each handler in a savepoint of its own
// and each Exec run at once, so the failing message is left out (its
// Outcome carries the error) and the others commit exactly once. A
// deadlock or serialization failure fails the batch's transaction as a
// handler's does (store.ErrSerialization).
//
// What changes is when the statement runs, so Exec is for writes whose
// outcome the handler does not read: it returns no affected-row count, a
// nil error means "queued" inside a fast pass (the statement's own error
// surfaces as the pass's failure), and a statement the handler, or a later
// handler of the batch, runs on tx directly is sent before the queued ones
// and does not see their effects. A handler that needs them first calls
// Flush. Like tx itself, Exec is not for concurrent use; args are copied,
// but the values they point to (a byte slice) are read when the queue is
// sent.
func Exec[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, sql string, args ...any) error {
	if qu := queueFor(ctx, tx); qu != nil {
		if qu.err != nil {
			return qu.err
		}
		qu.stmts = append(qu.stmts, store.Stmt{SQL: sql, Args: slices.Clone(args)})
		return nil
	}
	_, err := d.Tx(tx).Exec(ctx, sql, args...)
	return err
}

// Flush sends the statements Exec queued for tx in the running fast pass
// now, in one round trip with a driver that pipelines, so that what the
// handler runs next on tx sees their effects. It returns the first
// statement's error; the pass then fails (and is replayed message by
// message) whatever the handler returns. Outside a fast pass, or with
// nothing queued, it does nothing.
func Flush[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx) error {
	qu := queueFor(ctx, tx)
	if qu == nil {
		return nil
	}
	return qu.flush(ctx, d.Tx(tx), d.SendBatch, nil)
}

// queue holds the statements Exec queued during one fast pass.
type queue struct {
	tx     any // the pass's transaction
	stmts  []store.Stmt
	err    error // the first failure of a Flush: the pass has failed
	closed bool  // the pass is over: Exec runs at once
}

type queueKey struct{}

// withQueue returns ctx carrying a new queue for tx's fast pass.
func withQueue[TTx any](ctx context.Context, tx TTx) (context.Context, *queue) {
	qu := &queue{tx: tx}
	return context.WithValue(ctx, queueKey{}, qu), qu
}

// queueFor returns the open queue of ctx's fast pass when it runs on tx.
func queueFor[TTx any](ctx context.Context, tx TTx) *queue {
	qu, _ := ctx.Value(queueKey{}).(*queue)
	if qu == nil || qu.closed || !sameTx(qu.tx, tx) {
		return nil
	}
	return qu
}

// sameTx reports whether a and b are the same transaction value; values
// of a type that cannot be compared are never the same.
func sameTx(a, b any) bool {
	ta := reflect.TypeOf(a)
	if ta == nil || ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

// flush sends the queued statements followed by tail in one batch and
// empties the queue. A failure is kept: the pass has failed.
func (qu *queue) flush(ctx context.Context, q store.Querier, send func(context.Context, store.Querier, []store.Stmt) error, tail []store.Stmt) error {
	if qu.err != nil {
		return qu.err
	}
	if len(qu.stmts) == 0 && len(tail) == 0 {
		return nil
	}
	stmts := append(qu.stmts, tail...)
	qu.stmts = nil
	if err := send(ctx, q, stmts); err != nil {
		qu.err = fmt.Errorf("inbox: queued handler statements: %w", err)
		return qu.err
	}
	return nil
}
