package sqlite

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// outboxCols is the column list of an enqueued row (13 per row, the order of
// sqlset.Outbox.Insert's arguments); outboxClaimCols what a claim returns.
const (
	outboxCols      = `source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, created_at, traceparent, tracestate`
	outboxArgs      = 13
	outboxClaimCols = `seq, source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, attempts, traceparent, tracestate`
)

// outboxSQL: SQLite serialises writers, so there are no advisory locks
// (LockShared, LockClaim) and no one-statement Enqueue with key locks and
// notifications; relays take turns through the single-writer lease row
// (AcquireLease, ReleaseLease) instead.
func outboxSQL(t func(string) string, _ store.Names) sqlset.Outbox {
	o, l := t("outbox"), t("outbox_lease")
	const (
		pending   = `'` + lease.Pending + `'`
		completed = `'` + lease.Completed + `'`
		failed    = `'` + lease.Failed + `'`
	)
	// inSeqs matches the seqs of a JSON array text ($n).
	inSeqs := func(n int) string {
		return `seq IN (SELECT value FROM json_each($` + strconv.Itoa(n) + `))`
	}
	// A row is claimable when it is pending and due, not under a live claim
	// (an expired claim is taken over), and no earlier row of its ordering
	// key blocks it. A blocker is an earlier row that is failed (parked),
	// waiting for a retry, or claimed (by anyone, this relay included): an
	// earlier row that is itself claimable is claimed in the same batch
	// (ORDER BY seq LIMIT takes a prefix), so it is published first. The
	// probe's predicate repeats the partial index outbox_block_idx's.
	claimable := `
		SELECT o.seq FROM ` + o + ` o
		WHERE o.state = ` + pending + ` AND o.next_attempt_at <= $3 AND o.claim_until <= $3
		  AND NOT EXISTS (
		        SELECT 1 FROM ` + o + ` b
		        WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq
		          AND b.ordering_key <> '' AND (b.state = ` + failed + ` OR (b.state = ` + pending + ` AND (b.claim_until > 0 OR b.next_attempt_at > 0)))
		          AND (b.state = ` + failed + ` OR b.next_attempt_at > $3 OR b.claim_until > $3))
		ORDER BY o.seq
		LIMIT $4`
	retry := `UPDATE ` + o + ` SET state = ` + pending + `, attempts = 0, next_attempt_at = 0, claimed_by = '', claim_until = 0
		WHERE state = ` + failed
	parkedCols := outboxClaimCols + `, last_error`
	return sqlset.Outbox{
		Insert: func(n int) string {
			var b strings.Builder
			b.WriteString(`INSERT INTO ` + o + ` (` + outboxCols + `) VALUES `)
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteByte('(')
				for j := range outboxArgs {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteByte('$')
					b.WriteString(strconv.Itoa(i*outboxArgs + j + 1))
				}
				b.WriteByte(')')
			}
			b.WriteString(` ON CONFLICT (source, event_id) DO NOTHING RETURNING source, event_id, seq`)
			return b.String()
		},
		Existing: `SELECT type, subject, payload FROM ` + o + ` WHERE source = $1 AND event_id = $2`,
		AcquireLease: `INSERT INTO ` + l + ` (name, holder, lease_until) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, lease_until = excluded.lease_until
			WHERE ` + l + `.holder = excluded.holder OR ` + l + `.lease_until <= $4`,
		ReleaseLease: `UPDATE ` + l + ` SET lease_until = 0 WHERE name = $1 AND holder = $2`,
		Claim: `UPDATE ` + o + ` SET claimed_by = $1, claim_until = $2
			WHERE seq IN (` + claimable + `)
			RETURNING ` + outboxClaimCols,
		Complete: `UPDATE ` + o + ` SET state = ` + completed + `, published_at = $1, claimed_by = '', claim_until = 0, last_error = ''
			WHERE ` + inSeqs(2) + ` AND state = ` + pending,
		DeletePublished: `DELETE FROM ` + o + ` WHERE ` + inSeqs(1) + ` AND state = ` + pending,
		Release: `UPDATE ` + o + ` SET claimed_by = '', claim_until = 0
			WHERE ` + inSeqs(2) + ` AND claimed_by = $1 AND state = ` + pending,
		Fail: `UPDATE ` + o + ` SET state = $3, attempts = attempts + 1, last_error = $4, next_attempt_at = $5, claimed_by = '', claim_until = 0
			WHERE seq = $2 AND claimed_by = $1 AND state = ` + pending,
		Expire: `DELETE FROM ` + o + ` WHERE seq IN (
			SELECT seq FROM ` + o + ` WHERE state = ` + completed + ` AND published_at < $1 ORDER BY published_at LIMIT $2)`,
		RetryParked:     retry,
		RetryParkedSeqs: retry + ` AND ` + inSeqs(1),
		ListParked:      `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE state = ` + failed + ` ORDER BY ordering_key, seq LIMIT $1`,
		CountBlocked:    `SELECT count(*) FROM ` + o + ` WHERE ordering_key = $1 AND seq > $2 AND state = ` + pending,
		BlockedBehind:   `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE ordering_key = $1 AND seq > $2 AND state = ` + pending + ` ORDER BY seq LIMIT $3`,
		// No LATERAL in SQLite: the blocked rows of every parked event are
		// numbered and counted by window functions, the first $2 kept.
		BlockedBehindSeqs: `SELECT parked_seq, blocked_n, ` + parkedCols + ` FROM (
			SELECT p.seq AS parked_seq, count(*) OVER (PARTITION BY p.seq) AS blocked_n,
				row_number() OVER (PARTITION BY p.seq ORDER BY b.seq) AS blocked_rn, b.*
			FROM ` + o + ` p JOIN ` + o + ` b ON b.ordering_key = p.ordering_key AND b.seq > p.seq AND b.state = ` + pending + `
			WHERE p.` + inSeqs(1) + ` AND p.state = ` + failed + ` AND p.ordering_key <> '')
			WHERE blocked_rn <= $2 ORDER BY parked_seq, seq`,
		GetParked:     `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE seq = $1 AND state = ` + failed,
		DiscardParked: `DELETE FROM ` + o + ` WHERE seq = $1 AND state = ` + failed,
		Counts:        `SELECT state, count(*) FROM ` + o + ` GROUP BY state ORDER BY state`,
		CountState:    `SELECT count(*) FROM ` + o + ` WHERE state = $1`,
		State:         `SELECT state FROM ` + o + ` WHERE source = $1 AND event_id = $2`,
		Backlog: `SELECT (SELECT count(*) FROM ` + o + ` WHERE state = ` + pending + `),
			coalesce((SELECT created_at FROM ` + o + ` WHERE state = ` + pending + ` ORDER BY seq LIMIT 1), 0)`,
	}
}
