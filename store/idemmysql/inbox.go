package idemmysql

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/sqlset"
)

func inbox(t func(string) string) sqlset.Inbox {
	table := t("inbox")
	const insert = ` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
VALUES ($1, $2, $3, 'completed', $4, $4, $5)`
	const fenced = ` WHERE consumer = $1 AND message_id = $2 AND state = 'in_progress' AND token = $3`
	return sqlset.Inbox{
		Insert:       `/*idem:nodup*/ INSERT INTO ` + table + insert,
		InsertStrict: `INSERT INTO ` + table + insert,
		// A shared locking read: after a conflict it sees the committed
		// row whatever the caller's snapshot, and its lock is compatible
		// with the one the failed INSERT holds.
		Select: `SELECT fingerprint, state, token, lease_until, attempts FROM ` + table + ` WHERE consumer = $1 AND message_id = $2 LOCK IN SHARE MODE`,
		Lookup: `SELECT state, expires_at FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,
		Delete: `DELETE FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,

		// A claim locks the record exclusively when it exists: a plain
		// INSERT that meets an existing key holds a shared lock on it, and
		// two claimers upgrading theirs to take the record over would
		// deadlock. ON DUPLICATE KEY takes the exclusive lock at once and
		// changes nothing (see the fresh directive), so recoverers queue
		// and each decides on the latest record, in one round trip.
		// (Claims run in idem's own READ COMMITTED transactions: no gap
		// lock on a missing key.)
		Claim: `/*idem:fresh*/ INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, token, attempts, lease_until, received_at, expires_at)
VALUES ($1, $2, $3, 'in_progress', 1, 1, $4, $5, $6)
ON DUPLICATE KEY UPDATE token = IF(LAST_INSERT_ID(token) IS NULL, token, token)`,
		TakeOver: `UPDATE ` + table + ` SET token = token + 1, attempts = attempts + 1, lease_until = $4` +
			fenced + ` AND lease_until <= $5;
/*idem:need*/ SELECT token, attempts FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,
		Complete: `UPDATE ` + table + ` SET state = 'completed', processed_at = $4, lease_until = 0` + fenced,
		Extend:   `UPDATE ` + table + ` SET lease_until = $4` + fenced,
		Release:  `DELETE FROM ` + table + fenced,
		Fail:     `UPDATE ` + table + ` SET state = 'failed', lease_until = 0, processed_at = $4` + fenced,
		Abandoned: `SELECT message_id, token, attempts, lease_until, received_at FROM ` + table + `
WHERE consumer = $1 AND state = 'in_progress' AND lease_until <= $2 ORDER BY lease_until LIMIT $3`,

		// One multi-row INSERT … ON DUPLICATE KEY UPDATE that changes
		// nothing on an existing record but notes its message_id (ids hold
		// no control character, so a newline separates them) in a session
		// variable; then the batch's records not noted, i.e. inserted.
		// ON DUPLICATE KEY locks an existing record exclusively, in the
		// batch's (sorted) order: overlapping batches queue, whereas an
		// INSERT skipping duplicates would leave shared locks that the
		// batches' later statements deadlock on.
		BatchInsert: func(n int) string {
			var b, in strings.Builder
			b.WriteString("SET @idem_inbox_dups = '';\n/*idem:quiet*/ INSERT INTO " + table +
				" (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at) VALUES ")
			for i := range n {
				id, fp := strconv.Itoa(4+2*i), strconv.Itoa(5+2*i)
				if i > 0 {
					b.WriteByte(',')
					in.WriteByte(',')
				}
				b.WriteString("($1, $" + id + ", $" + fp + ", 'completed', $2, $2, $3)")
				in.WriteString("$" + id)
			}
			b.WriteString(` ON DUPLICATE KEY UPDATE consumer = IF((@idem_inbox_dups := CONCAT(@idem_inbox_dups, message_id, CHAR(10))) IS NULL, consumer, consumer);
SELECT message_id FROM ` + table + ` WHERE consumer = $1 AND message_id IN (` + in.String() + `)
 AND LOCATE(CONCAT(CHAR(10), message_id, CHAR(10)), CONCAT(CHAR(10), @idem_inbox_dups)) = 0`)
			return b.String()
		},
		BatchSelect: func(n int) string {
			var b strings.Builder
			// FORCE INDEX: the locking read probes each key; a scan of the
			// consumer's records would wait on rows outside the batch.
			b.WriteString(`SELECT message_id, fingerprint, state FROM ` + table + ` FORCE INDEX (PRIMARY) WHERE consumer = $1 AND message_id IN (`)
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("$" + strconv.Itoa(2+i))
			}
			b.WriteString(`) LOCK IN SHARE MODE`)
			return b.String()
		},

		BatchSavepoint:         `SAVEPOINT idem_inbox_batch`,
		BatchSavepointRelease:  `RELEASE SAVEPOINT idem_inbox_batch`,
		BatchSavepointRollback: `ROLLBACK TO SAVEPOINT idem_inbox_batch; RELEASE SAVEPOINT idem_inbox_batch`,
		Savepoint:              `SAVEPOINT idem_inbox_msg`,
		SavepointNext:          `RELEASE SAVEPOINT idem_inbox_msg; SAVEPOINT idem_inbox_msg`,
		SavepointRollback:      `ROLLBACK TO SAVEPOINT idem_inbox_msg`,
		SavepointRelease:       `RELEASE SAVEPOINT idem_inbox_msg`,

		// Single-table DELETE … LIMIT: the condition is evaluated on the
		// latest row version, under its lock.
		Expire:          `DELETE FROM ` + table + ` WHERE expires_at < $1 LIMIT $2`,
		CountByState:    `SELECT state, count(*) FROM ` + table + ` GROUP BY state`,
		CountByConsumer: `SELECT consumer, count(*) FROM ` + table + ` GROUP BY consumer`,
		ExpireKeeping: func(n int) string {
			var cond strings.Builder
			cond.WriteString(`expires_at < $1`)
			for i := range n {
				cond.WriteString(` AND NOT (consumer = $` + strconv.Itoa(2+2*i) + ` AND received_at >= $` + strconv.Itoa(3+2*i) + `)`)
			}
			return `DELETE FROM ` + table + ` WHERE ` + cond.String() + ` LIMIT $` + strconv.Itoa(2+2*n)
		},
	}
}
