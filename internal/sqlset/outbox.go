package sqlset

// Outbox holds the statements on the outbox table and its relay lease
// (package outbox).
//
// States are those of internal/lease: 'pending' (waiting to be published,
// claimed or not), 'completed' (published; the API calls it published) and
// 'failed' (parked: it exhausted its attempts). A claim is a lease on a
// pending row: claimed_by names the relay (MySQL: a 16-byte digest of its
// name, see store/idemmysql), claim_until is when the lease
// runs out; a claim whose lease ran out is taken over by the next claim.
//
// Seqs lists are bound as one text argument holding a JSON array of
// integers ("[1,2,3]"), on every dialect.
//
// Claimed rows are returned by Claim, ListParked, BlockedBehind and
// GetParked with these columns, in this order: seq, source, event_id, type,
// subject, ce_subject, time, datacontenttype, ordering_key, headers,
// payload, attempts, traceparent, tracestate (the parked-event statements
// add last_error).
type Outbox struct {
	// Enqueue inserts a whole EnqueueTx in one statement, hence one round
	// trip: it takes the transaction-scoped advisory lock of every distinct
	// non-empty ordering key (in hash order, so enqueuers cannot deadlock)
	// before any row gets its seq, inserts the rows in argument order,
	// skips an existing (source, event_id) and queues the wake-up
	// notification (delivered at commit). The events travel as parallel
	// arrays: $1 source, $2 event_id, $3 type, $4 subject (broker topic),
	// $5 ce_subject, $6 time (micros), $7 datacontenttype, $8 ordering_key,
	// $9 headers (JSON text), $10 payload (bytes) — each an array of one
	// element per event; $11 created_at (micros), $12 key-lock namespace
	// (int4), $13 take key locks (bool), $14 notification channel, $15
	// notify (bool); $16 traceparent, $17 tracestate (arrays again).
	// Returns source, event_id, seq of each inserted row. Empty where the
	// dialect inserts with Insert (SQLite: writers are serialised, no key
	// locks nor notifications).
	Enqueue string
	// EnqueueOne is Enqueue for one event, without arrays: $1…$13 the row
	// as in Insert, $14 key-lock namespace (int4), $15 take the event's
	// key lock (bool), $16 notification channel, $17 notify (bool). It
	// takes the lock (when $15 and the key is not empty) and queues the
	// notification before the row gets its seq, skips an existing
	// (source, event_id) and returns source, event_id, seq of the row it
	// inserted. It spares a one-event transaction Enqueue's array
	// encoding and unnest (BenchmarkEnqueueSQL/keyed: 0.65–0.66 of
	// Watermill's insert with Enqueue, 0.69–0.73 with EnqueueOne). Empty
	// where the dialect has no Enqueue, or decides duplicates elsewhere
	// (then Enqueue is used).
	EnqueueOne string
	// Insert returns the multi-row INSERT of n events, 13 arguments per
	// event in this order: source, event_id, type, subject (broker topic),
	// ce_subject, time (micros), datacontenttype, ordering_key, headers
	// (JSON text), payload, created_at (micros), traceparent, tracestate.
	// Skips an existing (source, event_id); returns source, event_id, seq
	// of each inserted row.
	Insert func(n int) string
	// Existing reads the event a duplicate enqueue collided with: $1
	// source, $2 event_id. Returns type, subject (topic), payload.
	Existing string

	// LockShared takes the relays' shared lock for the transaction: $1 the
	// relay lock key (bigint). Settling, retrying and discarding hold it so
	// they never interleave with a claim, which takes it exclusively. Empty
	// where writers are serialised by the database (SQLite).
	LockShared string
	// LockClaim opens a claim transaction: it takes the relays' exclusive
	// lock ($1 relay lock key, bigint) in a statement of its own, so the
	// claim's snapshot sees every earlier row of a key settled; it bounds
	// the statements that follow ($2 statement timeout in milliseconds, as
	// text), pins the claim's plan to ordered index scans and may let the
	// transaction commit without waiting for durability (a lost claim or
	// mark only republishes events with their ids). Empty on SQLite, where
	// the relay lease (AcquireLease) serialises relays.
	LockClaim string
	// AcquireLease takes or renews the single-writer relay lease: $1
	// lease name, $2 holder (relay name), $3 lease until (micros), $4 now
	// (micros). One row affected: the lease is ours; none: another relay
	// holds it. Empty where relays run concurrently (PostgreSQL).
	AcquireLease string
	// ReleaseLease gives the lease up: $1 lease name, $2 holder. Empty
	// where AcquireLease is.
	ReleaseLease string

	// Claim claims the next batch for one relay: the pending rows that are
	// due and not under a live claim (an expired claim is taken over), and
	// that no earlier row of their ordering key blocks (failed, waiting for
	// a retry, or under a claim), at most $4 in seq order. $1 holder
	// (relay name), $2 claim until (micros), $3 now (micros), $4 limit.
	// Returns the claim columns (see Outbox).
	Claim string
	// Complete marks published events completed: $1 published_at (micros),
	// $2 seqs. It clears the claim whoever holds it: the broker acked the
	// events.
	Complete string
	// DeletePublished deletes published events instead of marking them
	// (RelayConfig.DeletePublished): $1 seqs (as Complete's $2). Like
	// Complete it deletes a row whoever holds its claim; only pending rows
	// are deleted.
	DeletePublished string
	// Release gives claims back untouched: $1 holder, $2 seqs. Only the
	// holder's claims are released.
	Release string
	// Fail records a failed publish attempt of one event, fenced by the
	// claim: $1 holder, $2 seq, $3 new state ('pending' to retry, 'failed'
	// to park), $4 last error, $5 next attempt (micros; 0 when parked). No
	// row affected: the claim was taken over.
	Fail string

	// Expire deletes up to $2 completed events published before $1
	// (micros), oldest first.
	Expire string
	// RetryParked moves every failed (parked) event back to pending with
	// its attempts reset. No arguments.
	RetryParked string
	// RetryParkedSeqs is RetryParked for the seqs in $1.
	RetryParkedSeqs string
	// ListParked lists up to $1 failed (parked) events by ordering key and
	// seq: the claim columns, then last_error.
	ListParked string
	// CountBlocked counts the pending events of ordering key $1 after seq
	// $2.
	CountBlocked string
	// BlockedBehind lists up to $3 pending events of ordering key $1 after
	// seq $2, in seq order: the claim columns, then last_error.
	BlockedBehind string
	// BlockedBehindSeqs is BlockedBehind and CountBlocked for many parked
	// events in one statement: for each failed (parked) event whose seq is
	// in $1 (a JSON array) and whose ordering key is not empty, the pending events of its
	// key after it. One row per such blocked event, at most $2 per parked
	// event, ordered by parked seq then seq: the parked seq, the number of
	// pending events behind it (all of them, not only those returned), then
	// the claim columns and last_error of the blocked event. A parked event
	// nothing waits behind returns no row.
	BlockedBehindSeqs string
	// GetParked reads the failed (parked) event seq $1: the claim columns,
	// then last_error.
	GetParked string
	// DiscardParked deletes the failed (parked) event seq $1.
	DiscardParked string

	// Counts returns state, count(*) per stored state. No arguments.
	Counts string
	// CountState counts the events in state $1.
	CountState string
	// State reads the stored state of the event $1 source, $2 event_id: one
	// row, or none when there is no such event (never enqueued, or expired).
	State string
	// Backlog returns, in one snapshot, the number of pending events and
	// the created_at (micros) of the oldest one by seq (0 when none). No
	// arguments.
	Backlog string
}
