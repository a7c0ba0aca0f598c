package postgres

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

func outboxSQL(t func(string) string, _ store.Names) sqlset.Outbox {
	o := t("outbox")
	const (
		pending   = `'` + lease.Pending + `'`
		completed = `'` + lease.Completed + `'`
		failed    = `'` + lease.Failed + `'`
	)
	// inSeqs matches the seqs of a JSON array text ($n): the array is built
	// once (an InitPlan), so the primary key is probed with = ANY.
	inSeqs := func(n int) string {
		return `seq = ANY(ARRAY(SELECT json_array_elements_text($` + strconv.Itoa(n) + `::json)::bigint))`
	}
	// A row is claimable when it is pending and due, not under a live claim
	// (an expired claim is taken over), and no earlier row of its ordering
	// key blocks it. A blocker is an earlier row that is failed (parked),
	// waiting for a retry, or claimed (by anyone, this relay included): an
	// earlier row that is itself claimable is claimed in the same batch
	// (ORDER BY seq LIMIT takes a prefix), so it is published first.
	//
	// Plan robustness: the table grows from empty to a large backlog faster
	// than autovacuum analyzes it, and a plan chosen on empty statistics
	// (evaluate the probe for every pending row, then sort) made one claim
	// take seconds. Two things keep the claim linear in the batch whatever
	// the statistics: the probe's partial index (outbox_block_idx) holds only
	// potential blockers, so a probe is one index descent however many
	// pending rows a key has (its predicate is repeated verbatim below so it
	// is provably usable, also in a generic plan); and the claim transaction
	// disables sequential, bitmap and sort plans (LockClaim), which leaves
	// the ordered scan of outbox_pending_idx that stops after $4 rows. The
	// statement timeout stays as a backstop.
	//
	// No row locks (FOR UPDATE SKIP LOCKED) before the update: every writer
	// of pending rows holds the relays' lock (claims exclusively, settling,
	// retrying and discarding shared), so the claim has nothing to skip, and
	// a lock written per row before its update cost one WAL record and a
	// third of the claim's time. The rows are updated by ctid (a TID scan of
	// the snapshot's row versions, no index on seq); the conditions repeated
	// on the updated row are re-checked on its newest version should one
	// exist.
	//
	// HOT claims (migration 0013): the blocking index reads key_claim_until,
	// which the claim sets to the lease on rows with an ordering key and
	// leaves at 0 on the others, and every statement that clears
	// claim_until clears it too. A keyless row's claim (and its release)
	// then changes no column an index refers to, and PostgreSQL writes it
	// as a heap-only update on the row's page: one WAL record per row
	// instead of about four, and no index entry (TestClaimIsHeapOnly).
	claimable := `
		SELECT o.ctid FROM ` + o + ` o
		WHERE o.state = ` + pending + ` AND o.next_attempt_at <= $3 AND o.claim_until <= $3
		  AND NOT EXISTS (
		        SELECT 1 FROM ` + o + ` b
		        WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq
		          AND b.ordering_key <> '' AND (b.state = ` + failed + ` OR (b.state = ` + pending + ` AND (b.key_claim_until > 0 OR b.next_attempt_at > 0)))
		          AND (b.state = ` + failed + ` OR b.next_attempt_at > $3 OR b.key_claim_until > $3))
		ORDER BY o.seq
		LIMIT $4`
	retry := `UPDATE ` + o + ` SET state = ` + pending + `, attempts = 0, next_attempt_at = 0, claimed_by = '', claim_until = 0, key_claim_until = 0
		WHERE state = ` + failed
	parkedCols := outboxClaimCols + `, last_error`
	return sqlset.Outbox{
		Enqueue:    outboxEnqueue(o),
		EnqueueOne: outboxEnqueueOne(o),
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
		Existing:   `SELECT type, subject, payload FROM ` + o + ` WHERE source = $1 AND event_id = $2`,
		LockShared: `SELECT pg_advisory_xact_lock_shared($1::bigint)`,
		// The lock is taken in its own statement, before the claim's: the
		// claim's snapshot must be taken after the lock is granted. The
		// claim transaction commits without waiting for its WAL flush
		// (synchronous_commit off): what a server crash can lose of it is
		// the last claims and marks, whose events are then published again
		// with the same ids, as after a relay crash between ack and mark;
		// visibility and locking are unchanged. One fsync wait per round
		// was the relay's longest step on a busy disk.
		LockClaim: `SELECT pg_advisory_xact_lock($1::bigint), set_config('statement_timeout', $2::text, true),
			set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
			set_config('enable_sort', 'off', true), set_config('synchronous_commit', 'off', true)`,
		Claim: `UPDATE ` + o + ` SET claimed_by = $1, claim_until = $2::bigint,
			key_claim_until = CASE WHEN ordering_key <> '' THEN $2::bigint ELSE 0 END
			WHERE ctid = ANY(ARRAY(` + claimable + `))
			  AND state = ` + pending + ` AND next_attempt_at <= $3 AND claim_until <= $3
			RETURNING ` + outboxClaimCols,
		Complete: `UPDATE ` + o + ` SET state = ` + completed + `, published_at = $1, claimed_by = '', claim_until = 0, key_claim_until = 0, last_error = ''
			WHERE ` + inSeqs(2) + ` AND state = ` + pending,
		// One WAL record per row (the heap's delete) where the mark writes
		// a new row version and its entries in the dedup and completed
		// indexes: about three.
		DeletePublished: `DELETE FROM ` + o + ` WHERE ` + inSeqs(1) + ` AND state = ` + pending,
		Release: `UPDATE ` + o + ` SET claimed_by = '', claim_until = 0, key_claim_until = 0
			WHERE ` + inSeqs(2) + ` AND claimed_by = $1 AND state = ` + pending,
		Fail: `UPDATE ` + o + ` SET state = $3, attempts = attempts + 1, last_error = $4, next_attempt_at = $5, claimed_by = '', claim_until = 0, key_claim_until = 0
			WHERE seq = $2 AND claimed_by = $1 AND state = ` + pending,
		Expire: `DELETE FROM ` + o + ` WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM ` + o + ` WHERE state = ` + completed + ` AND published_at < $1 ORDER BY published_at LIMIT $2))
			AND state = ` + completed + ` AND published_at < $1`,
		RetryParked:     retry,
		RetryParkedSeqs: retry + ` AND ` + inSeqs(1),
		ListParked:      `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE state = ` + failed + ` ORDER BY ordering_key, seq LIMIT $1`,
		CountBlocked:    `SELECT count(*) FROM ` + o + ` WHERE ordering_key = $1 AND seq > $2 AND state = ` + pending,
		BlockedBehind:   `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE ordering_key = $1 AND seq > $2 AND state = ` + pending + ` ORDER BY seq LIMIT $3`,
		BlockedBehindSeqs: `SELECT p.seq, c.n, b.* FROM ` + o + ` p
			CROSS JOIN LATERAL (SELECT count(*) AS n FROM ` + o + ` x
				WHERE x.ordering_key = p.ordering_key AND x.seq > p.seq AND x.state = ` + pending + `) c
			CROSS JOIN LATERAL (SELECT ` + parkedCols + ` FROM ` + o + ` x
				WHERE x.ordering_key = p.ordering_key AND x.seq > p.seq AND x.state = ` + pending + ` ORDER BY x.seq LIMIT $2) b
			WHERE p.` + inSeqs(1) + ` AND p.state = ` + failed + ` AND p.ordering_key <> ''
			ORDER BY p.seq, b.seq`,
		GetParked:     `SELECT ` + parkedCols + ` FROM ` + o + ` WHERE seq = $1 AND state = ` + failed,
		DiscardParked: `DELETE FROM ` + o + ` WHERE seq = $1 AND state = ` + failed,
		Counts:        `SELECT state, count(*) FROM ` + o + ` GROUP BY state ORDER BY state`,
		CountState:    `SELECT count(*) FROM ` + o + ` WHERE state = $1`,
		State:         `SELECT state FROM ` + o + ` WHERE source = $1 AND event_id = $2`,
		Backlog: `SELECT (SELECT count(*) FROM ` + o + ` WHERE state = ` + pending + `),
			coalesce((SELECT created_at FROM ` + o + ` WHERE state = ` + pending + ` ORDER BY seq LIMIT 1), 0)`,
	}
}

// outboxEnqueue is sqlset.Outbox.Enqueue: a whole EnqueueTx in one
// statement, hence one round trip whatever the number of events.
//
// The rows pass a one-time filter made of two uncorrelated sub-selects
// (InitPlans, evaluated once, in order, before the first row is produced):
// the first takes the transaction-scoped advisory lock of every distinct
// non-empty ordering key in hash order (OFFSET 0 keeps the sorted subquery
// from being flattened, so two enqueuers cannot deadlock on keys), the second
// queues the pg_notify (delivered at commit) when $15 is true. So the key
// locks are held before any row gets its seq, as with separate statements.
// Rows are inserted in argument order (WITH ORDINALITY), so events of one key
// in one call get increasing seqs; existing (source, event_id) are skipped by
// ON CONFLICT and not returned. Explicit casts make every parameter's type
// known.
func outboxEnqueue(o string) string {
	return `INSERT INTO ` + o + ` (` + outboxCols + `)
		SELECT e.source, e.event_id, e.type, e.subject, e.ce_subject, e.time, e.datacontenttype, e.ordering_key, e.headers, e.payload, $11::bigint,
		       e.traceparent, e.tracestate
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::bytea[],
		            $16::text[], $17::text[])
		     WITH ORDINALITY AS e(source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, traceparent, tracestate, ord)
		WHERE (SELECT count(*) FROM (
		        SELECT pg_advisory_xact_lock($12::int4, h) FROM (
		          SELECT DISTINCT hashtext(k) AS h FROM unnest($8::text[]) AS u(k)
		          WHERE k <> '' AND $13::bool ORDER BY 1 OFFSET 0) s) l) >= 0
		  AND (SELECT count(*) FROM (SELECT pg_notify($14::text, '') WHERE $15::bool) n) >= 0
		ORDER BY e.ord
		ON CONFLICT (source, event_id) DO NOTHING
		RETURNING source, event_id, seq`
}

// outboxEnqueueOne is sqlset.Outbox.EnqueueOne: outboxEnqueue for one
// event, its values as scalar parameters. The key lock and the
// notification are one-time filters (InitPlans) like outboxEnqueue's, so
// both happen before the row gets its seq.
func outboxEnqueueOne(o string) string {
	return `INSERT INTO ` + o + ` (` + outboxCols + `)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::text, $8::text, $9::text, $10::bytea, $11::bigint, $12::text, $13::text
		WHERE (SELECT count(*) FROM (SELECT pg_advisory_xact_lock($14::int4, hashtext($8::text)) WHERE $8::text <> '' AND $15::bool) l) >= 0
		  AND (SELECT count(*) FROM (SELECT pg_notify($16::text, '') WHERE $17::bool) n) >= 0
		ON CONFLICT (source, event_id) DO NOTHING
		RETURNING source, event_id, seq`
}
