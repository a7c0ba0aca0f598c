package outbox

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/idemkit/idem/store"
)

// All of the outbox's SQL, once per dialect.

// insertCols is the column list of an enqueued row; insertArgs per row.
const (
	insertCols = `source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, created_at, traceparent, tracestate`
	insertArgs = 13
	// maxRowsPerInsert bounds the bind variables of one INSERT (PostgreSQL:
	// 65535, SQLite: 32766).
	maxRowsPerInsert = 500

	claimCols = `seq, source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, attempts, traceparent, tracestate`
)

type queries struct {
	dialect store.Dialect
	table   string
	lease   string

	enqueue      string // PostgreSQL: one-round-trip Enqueue (see pgEnqueue)
	lockOwner    string // PostgreSQL: shared relay lock ($1 bigint)
	claimPlan    string // PostgreSQL: exclusive relay lock ($1 bigint), SET LOCAL statement_timeout ($2 ms text) and planner settings
	acquireLease string // SQLite: $1 name, $2 holder, $3 until, $4 now
	releaseLease string // SQLite: $1 name, $2 holder
	claim        string // $1 holder, $2 until, $3 now, $4 limit
	markDone     string // $1 now, $2 seqs
	release      string // $1 holder, $2 seqs
	fail         string // $1 holder, $2 seq, $3 state, $4 error, $5 next attempt
	existing     string // $1 source, $2 id
	prune        string // $1 before, $2 limit
	retryParked  string // no args
	retryParkedS string // $1 seqs
	countState   string // $1 state
	oldest       string
	ns32         int32 // key-lock namespace (two-int advisory lock space)
	ns64         int64 // relay lock (bigint advisory lock space)
	channel      string
}

func newQueries(d store.Dialect, names store.Names, table func(string) string) queries {
	t := table("outbox")
	q := queries{dialect: d, table: t, lease: table("outbox_lease")}
	h := fnv.New64a()
	h.Write([]byte("idem.outbox." + names.Schema + "." + names.Prefix))
	sum := h.Sum64()
	q.ns64 = int64(sum)
	q.ns32 = int32(sum >> 32)
	q.channel = "idem_outbox_" + names.Schema
	if len(q.channel) > 63 {
		q.channel = q.channel[:63]
	}

	// seqs: PostgreSQL binds a bigint[]; SQLite a JSON array text.
	inSeqs := func(n int) string {
		if d == store.Postgres {
			return `seq = ANY($` + strconv.Itoa(n) + `)`
		}
		return `seq IN (SELECT value FROM json_each($` + strconv.Itoa(n) + `))`
	}

	// A row is claimable when it is pending and due, not under a live claim,
	// and no earlier row of its ordering key blocks it. A blocker is an
	// earlier row that is parked, waiting for a retry, or claimed (by anyone,
	// this relay included): an earlier row that is itself claimable is claimed
	// in the same batch (ORDER BY seq LIMIT takes a prefix), so it is
	// published first.
	//
	// Plan robustness: the table grows from empty to a large backlog faster
	// than autovacuum analyzes it, and a plan chosen on empty statistics
	// (evaluate the probe for every pending row, then sort) made one claim
	// take seconds. Two things keep the claim linear in the batch whatever
	// the statistics: the probe's partial index (outbox_block_idx) holds only
	// potential blockers, so a probe is one index descent however many
	// pending rows a key has (its predicate is repeated verbatim below so it
	// is provably usable, also in a generic plan); and on PostgreSQL the claim
	// transaction disables sequential, bitmap and sort plans (claimPlan), which
	// leaves the ordered scan of outbox_pending_idx that stops after $4 rows.
	// The statement timeout stays as a backstop.
	claimable := `
		SELECT o.seq FROM ` + t + ` o
		WHERE o.state = 'pending' AND o.next_attempt_at <= $3 AND o.claim_until <= $3
		  AND NOT EXISTS (
		        SELECT 1 FROM ` + t + ` b
		        WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq
		          AND b.ordering_key <> '' AND (b.state = 'parked' OR (b.state = 'pending' AND (b.claim_until > 0 OR b.next_attempt_at > 0)))
		          AND (b.state = 'parked' OR b.next_attempt_at > $3 OR b.claim_until > $3))
		ORDER BY o.seq
		LIMIT $4`
	if d == store.Postgres {
		claimable += ` FOR UPDATE OF o SKIP LOCKED`
	}
	q.claim = `UPDATE ` + t + ` SET claimed_by = $1, claim_until = $2
		WHERE seq IN (` + claimable + `)
		RETURNING ` + claimCols
	q.markDone = `UPDATE ` + t + ` SET state = 'published', published_at = $1, claimed_by = '', claim_until = 0, last_error = ''
		WHERE ` + inSeqs(2) + ` AND state = 'pending'`
	q.release = `UPDATE ` + t + ` SET claimed_by = '', claim_until = 0
		WHERE ` + inSeqs(2) + ` AND claimed_by = $1 AND state = 'pending'`
	q.fail = `UPDATE ` + t + ` SET state = $3, attempts = attempts + 1, last_error = $4, next_attempt_at = $5, claimed_by = '', claim_until = 0
		WHERE seq = $2 AND claimed_by = $1 AND state = 'pending'`
	q.existing = `SELECT type, subject, payload FROM ` + t + ` WHERE source = $1 AND event_id = $2`
	q.prune = `DELETE FROM ` + t + ` WHERE seq IN (
		SELECT seq FROM ` + t + ` WHERE state = 'published' AND published_at < $1 ORDER BY published_at LIMIT $2)`
	q.retryParked = `UPDATE ` + t + ` SET state = 'pending', attempts = 0, next_attempt_at = 0, claimed_by = '', claim_until = 0
		WHERE state = 'parked'`
	q.retryParkedS = q.retryParked + ` AND ` + inSeqs(1)
	q.countState = `SELECT count(*) FROM ` + t + ` WHERE state = $1`
	q.oldest = `SELECT created_at FROM ` + t + ` WHERE state = 'pending' ORDER BY seq LIMIT 1`

	if d == store.Postgres {
		q.enqueue = pgEnqueue(t)
		q.lockOwner = `SELECT pg_advisory_xact_lock_shared($1::bigint)`
		// The lock is taken in its own statement, before the claim's: the
		// claim's snapshot must be taken after the lock is granted.
		q.claimPlan = `SELECT pg_advisory_xact_lock($1::bigint), set_config('statement_timeout', $2::text, true),
			set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
			set_config('enable_sort', 'off', true)`
	} else {
		q.acquireLease = `INSERT INTO ` + q.lease + ` (name, holder, lease_until) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, lease_until = excluded.lease_until
			WHERE ` + q.lease + `.holder = excluded.holder OR ` + q.lease + `.lease_until <= $4`
		q.releaseLease = `UPDATE ` + q.lease + ` SET lease_until = 0 WHERE name = $1 AND holder = $2`
	}
	return q
}

// pgEnqueue is Enqueue on PostgreSQL in one statement, hence one round trip
// whatever the number of events. The events travel as parallel arrays
// (explicit casts, so every parameter type is known): $1 source, $2 event_id,
// $3 type, $4 subject, $5 ce_subject, $6 time, $7 datacontenttype,
// $8 ordering_key, $9 headers, $10 payload; $11 created_at, $12 key-lock
// namespace, $13 take key locks, $14 channel, $15 notify; $16 traceparent,
// $17 tracestate (arrays again).
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
// ON CONFLICT and not returned.
func pgEnqueue(t string) string {
	return `INSERT INTO ` + t + ` (` + insertCols + `)
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

// insert returns the multi-row INSERT for n events (SQLite); it returns the
// inserted (source, event_id, seq) and skips existing (source, event_id).
func (q queries) insert(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + q.table + ` (` + insertCols + `) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := range insertArgs {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i*insertArgs + j + 1))
		}
		b.WriteByte(')')
	}
	b.WriteString(` ON CONFLICT (source, event_id) DO NOTHING RETURNING source, event_id, seq`)
	return b.String()
}

// seqArg binds a list of seqs for inSeqs.
func (q queries) seqArg(seqs []int64) any {
	if q.dialect == store.Postgres {
		return seqs
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s, 10))
	}
	b.WriteByte(']')
	return b.String()
}
