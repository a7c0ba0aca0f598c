package postgres

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
		Insert:       `INSERT INTO ` + table + insert + ` ON CONFLICT (consumer, message_id) DO NOTHING`,
		InsertStrict: `INSERT INTO ` + table + insert,
		Select:       `SELECT fingerprint, state, token, lease_until, attempts FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,
		Lookup:       `SELECT state, expires_at FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,
		Delete:       `DELETE FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,

		Claim: `INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, token, attempts, lease_until, received_at, expires_at)
VALUES ($1, $2, $3, 'in_progress', 1, 1, $4, $5, $6) ON CONFLICT (consumer, message_id) DO NOTHING`,
		TakeOver: `UPDATE ` + table + ` SET token = token + 1, attempts = attempts + 1, lease_until = $4` +
			fenced + ` AND lease_until <= $5
RETURNING token, attempts`,
		Complete: `UPDATE ` + table + ` SET state = 'completed', processed_at = $4, lease_until = 0` + fenced,
		Extend:   `UPDATE ` + table + ` SET lease_until = $4` + fenced,
		Release:  `DELETE FROM ` + table + fenced,
		Fail:     `UPDATE ` + table + ` SET state = 'failed', lease_until = 0, processed_at = $4` + fenced,
		Abandoned: `SELECT message_id, token, attempts, lease_until, received_at FROM ` + table + `
WHERE consumer = $1 AND state = 'in_progress' AND lease_until <= $2 ORDER BY lease_until LIMIT $3`,

		BatchInsert:          func(n int) string { return batchInsert(table, n, ` ON CONFLICT (consumer, message_id) DO NOTHING`) },
		BatchInsertStrict:    func(n int) string { return batchInsert(table, n, "") },
		BatchStrictSavepoint: `SAVEPOINT idem_inbox_strict`,
		BatchStrictRelease:   `RELEASE SAVEPOINT idem_inbox_strict`,
		BatchStrictRollback:  `ROLLBACK TO SAVEPOINT idem_inbox_strict`,
		BatchSelect: func(n int) string {
			var b strings.Builder
			b.WriteString(`SELECT message_id, fingerprint, state FROM ` + table + ` WHERE consumer = $1 AND message_id IN (`)
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("$" + strconv.Itoa(2+i))
			}
			b.WriteString(`)`)
			return b.String()
		},

		BatchSavepoint:         `SAVEPOINT idem_inbox_batch`,
		BatchSavepointRelease:  `RELEASE SAVEPOINT idem_inbox_batch`,
		BatchSavepointRollback: `ROLLBACK TO SAVEPOINT idem_inbox_batch; RELEASE SAVEPOINT idem_inbox_batch`,
		Savepoint:              `SAVEPOINT idem_inbox_msg`,
		SavepointNext:          `RELEASE SAVEPOINT idem_inbox_msg; SAVEPOINT idem_inbox_msg`,
		SavepointRollback:      `ROLLBACK TO SAVEPOINT idem_inbox_msg`,
		SavepointRelease:       `RELEASE SAVEPOINT idem_inbox_msg`,

		Expire:          `DELETE FROM ` + table + ` WHERE ctid IN (SELECT ctid FROM ` + table + ` WHERE expires_at < $1 LIMIT $2) AND expires_at < $1`,
		CountByState:    `SELECT state, count(*) FROM ` + table + ` GROUP BY state`,
		CountByConsumer: `SELECT consumer, count(*) FROM ` + table + ` GROUP BY consumer`,
		ExpireKeeping: func(n int) string {
			var cond strings.Builder
			cond.WriteString(`expires_at < $1`)
			for i := range n {
				cond.WriteString(` AND NOT (consumer = $` + strconv.Itoa(2+2*i) + ` AND received_at >= $` + strconv.Itoa(3+2*i) + `)`)
			}
			c := cond.String()
			return `DELETE FROM ` + table + ` WHERE ctid IN (SELECT ctid FROM ` + table + ` WHERE ` + c + ` LIMIT $` + strconv.Itoa(2+2*n) + `) AND ` + c
		},
	}
}

// batchInsert is sqlset.Inbox.BatchInsert for n messages, with conflict
// (an ON CONFLICT clause, or none for BatchInsertStrict).
func batchInsert(table string, n int, conflict string) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("($1, $" + strconv.Itoa(4+2*i) + ", $" + strconv.Itoa(5+2*i) + ", 'completed', $2, $2, $3)")
	}
	b.WriteString(conflict + ` RETURNING message_id`)
	return b.String()
}
