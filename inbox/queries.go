package inbox

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem/store"
)

// queries holds every statement the inbox runs, built once per driver. Both
// dialects accept the same text; the table name differs.
type queries struct {
	insert       string
	insertStrict string
	selectOne    string
	deleteOne    string
	claim        string
	takeover     string
	complete     string
	extend       string
	release      string
	fail         string
	abandoned    string
	batchSelect  func(n int) string
	batchInsert  func(n int) string
	dialect      store.Dialect
	savepoint    string
	savepointRel string
	savepointRb  string
}

func newQueries(d store.Dialect, table string) *queries {
	q := &queries{dialect: d}
	q.insert = `INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
VALUES ($1, $2, $3, 'completed', $4, $4, $5) ON CONFLICT (consumer, message_id) DO NOTHING`
	q.insertStrict = `INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
VALUES ($1, $2, $3, 'completed', $4, $4, $5)`
	q.selectOne = `SELECT fingerprint, state, token, lease_until, attempts FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`
	q.deleteOne = `DELETE FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`
	q.claim = `INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, token, attempts, lease_until, received_at, expires_at)
VALUES ($1, $2, $3, 'processing', 1, 1, $4, $5, $6) ON CONFLICT (consumer, message_id) DO NOTHING`
	q.takeover = `UPDATE ` + table + ` SET token = token + 1, attempts = attempts + 1, lease_until = $4
WHERE consumer = $1 AND message_id = $2 AND state = 'processing' AND token = $3 AND lease_until <= $5
RETURNING token, attempts`
	q.complete = `UPDATE ` + table + ` SET state = 'completed', processed_at = $4, lease_until = 0
WHERE consumer = $1 AND message_id = $2 AND state = 'processing' AND token = $3`
	q.extend = `UPDATE ` + table + ` SET lease_until = $4
WHERE consumer = $1 AND message_id = $2 AND state = 'processing' AND token = $3`
	q.release = `DELETE FROM ` + table + ` WHERE consumer = $1 AND message_id = $2 AND state = 'processing' AND token = $3`
	q.fail = `UPDATE ` + table + ` SET state = 'failed', lease_until = 0, processed_at = $4
WHERE consumer = $1 AND message_id = $2 AND state = 'processing' AND token = $3`
	q.abandoned = `SELECT message_id, token, attempts, lease_until, received_at FROM ` + table + `
WHERE consumer = $1 AND state = 'processing' AND lease_until <= $2 ORDER BY lease_until LIMIT $3`
	// Batch insert: $1 consumer, $2 received_at, $3 expires_at, then (id, fingerprint) pairs.
	q.batchInsert = func(n int) string {
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + table + ` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at) VALUES `)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "($1, $%d, $%d, 'completed', $2, $2, $3)", 4+2*i, 5+2*i)
		}
		b.WriteString(` ON CONFLICT (consumer, message_id) DO NOTHING RETURNING message_id`)
		return b.String()
	}
	q.batchSelect = func(n int) string {
		var b strings.Builder
		b.WriteString(`SELECT message_id, fingerprint, state FROM ` + table + ` WHERE consumer = $1 AND message_id IN (`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "$%d", 2+i)
		}
		b.WriteString(`)`)
		return b.String()
	}
	q.savepoint = `SAVEPOINT idem_inbox_msg`
	// Releasing one message's savepoint and opening the next one's is a
	// single round trip (two statements, simple protocol, no arguments).
	q.savepointRel = `RELEASE SAVEPOINT idem_inbox_msg; SAVEPOINT idem_inbox_msg`
	q.savepointRb = `ROLLBACK TO SAVEPOINT idem_inbox_msg`
	return q
}
