package retention

import (
	"fmt"

	"github.com/idemkit/idem/store"
)

// batchDelete returns a statement deleting at most a batch of rows of table
// matching cond. The batch size is the bound parameter $limitArg (one past
// the condition's own parameters), never text. The condition is repeated
// outside the row-id subquery so that, on PostgreSQL, a row changed
// concurrently is re-checked against its latest version before it is
// deleted (and SQLite's single writer makes the two evaluations agree).
//
//	PostgreSQL: DELETE FROM t WHERE ctid IN (SELECT ctid FROM t WHERE cond LIMIT $n) AND cond
//	SQLite:     DELETE FROM t WHERE rowid IN (SELECT rowid FROM t WHERE cond LIMIT $n) AND cond
//
// table and cond are idem's own constants; only the placeholder's number
// is formatted in.
func batchDelete(d store.Dialect, table, cond string, limitArg int) string {
	id := "rowid"
	if d == store.Postgres {
		id = "ctid"
	}
	return fmt.Sprintf(`DELETE FROM %[1]s WHERE %[2]s IN (SELECT %[2]s FROM %[1]s WHERE %[3]s LIMIT $%[4]d) AND %[3]s`,
		table, id, cond, limitArg)
}

// The expiry conditions; $1 is always the horizon in microseconds.
const (
	// Inbox rows past their expires_at (set from the inbox's per-consumer
	// retention when the message was received).
	condInbox = `expires_at < $1`
	// HTTP key records past their expires_at (per-operation retention is
	// applied when the record is written).
	condHTTPKeys = `expires_at < $1`
	// Published outbox events older than the outbox retention. Pending and
	// parked events are never deleted.
	condOutbox = `state = 'published' AND published_at < $1`
	// Completed effects past their expires_at (0 = keep forever). Pending,
	// in-progress and failed effects are never deleted.
	condEffects = `state = 'completed' AND expires_at > 0 AND expires_at < $1`
	// Dead letters an operator resolved (redriven or discarded) longer ago
	// than the DLQ retention. Parked letters are never deleted.
	condDeadLetters = `state IN ('redriven', 'discarded') AND resolved_at > 0 AND resolved_at < $1`
)

// The saga conditions name the other saga table, so they are built from
// the driver's qualified table names (idem's own constants, never input).
// $1 is the horizon in microseconds. A saga is finished when its state is
// completed or compensated: the saga package's terminal states (saga.Completed,
// saga.Compensated; there is no failed state, a failing compensation holds
// the saga). Running, compensating and held sagas are never touched, nor
// their steps, however old. updated_at is the finish time of a finished
// saga: the advancer sets it in the transition to the terminal state, and
// nothing updates a finished saga again (Abort needs state running, the
// advancer selects only running, compensating and held sagas and
// compare-and-sets on the version).

// condSagaSteps selects the barrier rows of finished sagas that finished
// before $1.
func condSagaSteps(sagas string) string {
	return `saga_id IN (SELECT saga_id FROM ` + sagas + ` WHERE ` + sagaFinished + `)`
}

// condSagas selects finished sagas that finished before $1 and have no
// barrier rows left: the steps are deleted first, and a saga whose steps
// remain (a pass stopped between the two tables) waits for the next pass,
// so no step row is ever left without its saga.
func condSagas(sagas, steps string) string {
	return sagaFinished + ` AND NOT EXISTS (SELECT 1 FROM ` + steps + ` st WHERE st.saga_id = ` + sagas + `.saga_id)`
}

const sagaFinished = `state IN ('completed', 'compensated') AND updated_at < $1`
