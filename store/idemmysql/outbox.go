package idemmysql

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/sqlset"
)

// outboxCols is the column list of an enqueued row (13 per row, the order of
// sqlset.Outbox.Insert's arguments); outboxClaimCols what a claim returns.
const (
	outboxCols      = `source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, created_at, traceparent, tracestate`
	outboxArgs      = 13
	outboxKeyArg    = 8 // ordering_key's place among an event's arguments
	outboxClaimCols = `seq, source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, attempts, traceparent, tracestate`
)

// outboxSQL: relays take turns through the single-writer lease row
// (AcquireLease, ReleaseLease), as on SQLite; enqueuers lock their ordering
// keys' rows of outbox_keys before inserting (see the package
// documentation).
func outboxSQL(t func(string) string) sqlset.Outbox {
	o, l, keys := t("outbox"), t("outbox_lease"), t("outbox_keys")
	const (
		pending   = `'` + lease.Pending + `'`
		completed = `'` + lease.Completed + `'`
		failed    = `'` + lease.Failed + `'`
	)
	// A claim names its relay by the first 16 bytes of the SHA-256 of its
	// name (not MD5, which a server in FIPS mode may refuse or answer
	// with zeros), and a pending or parked row nobody claims holds 16 zero
	// bytes (the column's default since migration 0019): a claim keeps the
	// column's width, so InnoDB rewrites the row in place instead of moving
	// a record that grew (BENCHMARKS.md, "MySQL and MariaDB"). A published
	// row is never claimed again, and its mark sets claimed_by to '': the
	// mark lengthens state by two bytes ('pending' to 'completed'), and
	// with 16 bytes taken off claimed_by the record still fits where it
	// was. The relay passes its name as $1.
	const (
		claimant  = `LEFT(UNHEX(SHA2($1, 256)), 16)`
		unclaimed = `x'00000000000000000000000000000000'`
	)
	// inSeqs matches the seqs of a JSON array text ($n).
	inSeqs := func(col string, n int) string {
		return col + ` IN (SELECT j.v FROM JSON_TABLE($` + strconv.Itoa(n) + `, '$[*]' COLUMNS (v BIGINT PATH '$')) AS j)`
	}
	// A row is claimable when it is pending and due, not under a live claim
	// (an expired claim is taken over), and no earlier row of its ordering
	// key blocks it: an earlier row that is failed (parked), waiting for a
	// retry, or claimed. An earlier row that is itself claimable is claimed
	// in the same batch (ORDER BY seq LIMIT takes a prefix). A row without
	// an ordering key skips the probe (o.ordering_key = '' first: the probe
	// would otherwise walk every earlier unkeyed row of the key index).
	claimable := `SELECT o.seq FROM ` + o + ` o
		WHERE o.state = ` + pending + ` AND o.next_attempt_at <= $3 AND o.claim_until <= $3
		  AND (o.ordering_key = '' OR NOT EXISTS (
		        SELECT 1 FROM ` + o + ` b
		        WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq
		          AND (b.state = ` + failed + ` OR (b.state = ` + pending + ` AND (b.claim_until > 0 OR b.next_attempt_at > 0)))
		          AND (b.state = ` + failed + ` OR b.next_attempt_at > $3 OR b.claim_until > $3)))
		ORDER BY o.seq
		LIMIT $4
		FOR UPDATE SKIP LOCKED`
	// joinSeqs is the outbox (as o) joined by primary key with the seqs the
	// JSON array text $n lists, for a multi-table UPDATE or DELETE: MariaDB
	// (before 11.1) runs a single-table UPDATE or DELETE … WHERE seq IN
	// (subquery) as a scan of the whole table, one dependent subquery per
	// row.
	joinSeqs := func(n int) string {
		return o + ` o JOIN JSON_TABLE($` + strconv.Itoa(n) + `, '$[*]' COLUMNS (v BIGINT PATH '$')) AS j ON o.seq = j.v`
	}
	updateSeqs := func(n int) string { return `UPDATE ` + joinSeqs(n) }
	const retrySet = ` SET state = ` + pending + `, attempts = 0, next_attempt_at = 0, claimed_by = ` + unclaimed + `, claim_until = 0
		WHERE state = ` + failed
	retry := `UPDATE ` + o + retrySet
	parkedCols := outboxClaimCols + `, last_error`
	return sqlset.Outbox{
		// The ordering keys' rows are locked first (distinct, non-empty,
		// in key order), then each event is inserted on its own, an
		// existing (source, event_id) skipped, emitting source, event_id
		// and the seq assigned.
		Insert: func(n int) string {
			var b strings.Builder
			b.WriteString(`INSERT INTO ` + keys + ` (ordering_key) SELECT k FROM (`)
			for i := range n {
				if i > 0 {
					b.WriteString(` UNION `)
				}
				b.WriteString(`SELECT $` + strconv.Itoa(i*outboxArgs+outboxKeyArg) + ` AS k`)
			}
			b.WriteString(`) AS ks WHERE k <> '' ORDER BY k ON DUPLICATE KEY UPDATE ordering_key = ` + keys + `.ordering_key;
`)
			for i := range n {
				base := i * outboxArgs
				b.WriteString(`/*idem:nodup emit:$` + strconv.Itoa(base+1) + `,$` + strconv.Itoa(base+2) + `,id*/ INSERT INTO ` + o + ` (` + outboxCols + `) VALUES (`)
				for j := range outboxArgs {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteByte('$')
					b.WriteString(strconv.Itoa(base + j + 1))
				}
				b.WriteString(");\n")
			}
			return b.String()
		},
		Existing: `SELECT type, subject, payload FROM ` + o + ` WHERE source = $1 AND event_id = $2 LOCK IN SHARE MODE`,
		// Renew or take over the lease; when no row matched, create it (a
		// duplicate means another relay holds it: no row affected).
		AcquireLease: `UPDATE ` + l + ` SET holder = $2, lease_until = $3 WHERE name = $1 AND (holder = $2 OR lease_until <= $4);
			/*idem:none nodup*/ INSERT INTO ` + l + ` (name, holder, lease_until) VALUES ($1, $2, $3)`,
		ReleaseLease: `UPDATE ` + l + ` SET lease_until = 0 WHERE name = $1 AND holder = $2`,
		Claim: `/*idem:collect*/ ` + claimable + `;
			UPDATE ` + o + ` SET claimed_by = ` + claimant + `, claim_until = $2 WHERE seq IN ($0);
			SELECT ` + outboxClaimCols + ` FROM ` + o + ` WHERE seq IN ($0) ORDER BY seq`,
		Complete: updateSeqs(2) + ` SET state = ` + completed + `, published_at = $1, claimed_by = '', claim_until = 0, last_error = ''
			WHERE state = ` + pending,
		DeletePublished: `DELETE o FROM ` + joinSeqs(1) + ` WHERE o.state = ` + pending,
		Release: updateSeqs(2) + ` SET claimed_by = ` + unclaimed + `, claim_until = 0
			WHERE claimed_by = ` + claimant + ` AND state = ` + pending,
		Fail: `UPDATE ` + o + ` SET state = $3, attempts = attempts + 1, last_error = $4, next_attempt_at = $5, claimed_by = ` + unclaimed + `, claim_until = 0
			WHERE seq = $2 AND claimed_by = ` + claimant + ` AND state = ` + pending,
		Expire:          `DELETE FROM ` + o + ` WHERE state = ` + completed + ` AND published_at < $1 ORDER BY published_at LIMIT $2`,
		RetryParked:     retry,
		RetryParkedSeqs: updateSeqs(1) + retrySet,
		ListParked:      `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE state = ` + failed + ` ORDER BY ordering_key, seq LIMIT $1`,
		CountBlocked:    `SELECT count(*) FROM ` + o + ` WHERE ordering_key = $1 AND seq > $2 AND state = ` + pending,
		BlockedBehind:   `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE ordering_key = $1 AND seq > $2 AND state = ` + pending + ` ORDER BY seq LIMIT $3`,
		// The blocked rows of every parked event are numbered and counted
		// by window functions, the first $2 kept.
		BlockedBehindSeqs: `SELECT parked_seq, blocked_n, ` + parkedCols + ` FROM (
			SELECT p.seq AS parked_seq, count(*) OVER (PARTITION BY p.seq) AS blocked_n,
				row_number() OVER (PARTITION BY p.seq ORDER BY b.seq) AS blocked_rn, b.*
			FROM ` + o + ` p JOIN ` + o + ` b ON b.ordering_key = p.ordering_key AND b.seq > p.seq AND b.state = ` + pending + `
			WHERE ` + inSeqs("p.seq", 1) + ` AND p.state = ` + failed + ` AND p.ordering_key <> '') AS x
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
