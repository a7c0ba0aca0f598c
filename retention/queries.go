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
