package sqlset

// DeadLetters holds the statements on the dead_letters table (package dlq).
//
// Columns: id (assigned by the database), consumer, source, position,
// message_id, msg_key, headers (JSON text), payload, fingerprint (the
// payload's fingerprint), error, error_class, attempts, first_failed_at,
// last_failed_at, state ('parked', 'redriven' or 'discarded'), redriven_by,
// redriven_at, resolved_by, resolved_at, created_at (microseconds),
// redrive_reason, and (migration 0018_letter_revision) revision_id (the
// message id of the letter's revision, empty for none), revision_payload
// and revision_record_expires_at (the expiry of the inbox record the
// revision wrote, 0 for none).
//
// The statements that return letters select, in this order: id, consumer,
// source, position, message_id, msg_key, headers, payload, fingerprint,
// error, error_class, attempts, first_failed_at, last_failed_at, state,
// redriven_by, redriven_at, resolved_by, resolved_at, created_at,
// redrive_reason, revision_id, revision_payload, revision_record_expires_at.
type DeadLetters struct {
	// Park inserts a parked letter, or, when the same (consumer,
	// message_id, fingerprint) is already parked, updates that letter's
	// attempts (the greater of stored+1 and the new count), error,
	// error_class, source, position, headers and last_failed_at; returns
	// id. $1 consumer, $2 source, $3 position, $4 message_id, $5 msg_key,
	// $6 headers, $7 payload, $8 fingerprint, $9 error, $10 error_class,
	// $11 attempts, $12 now (first_failed_at, last_failed_at, created_at).
	Park string
	// Get reads one letter (the letter columns). $1 id.
	Get string
	// List reads letters oldest id first (the letter columns); an empty or
	// zero filter argument does not filter. $1 consumer (''), $2
	// last_failed_at at or after (0), $3 last_failed_at before (0), $4
	// error_class (''), $5 state (''), $6 id greater than (0), $7 limit
	// (a huge number for none).
	List string
	// OfMessage reads the letters of one message id, every consumer and
	// every state, oldest id first (the letter columns). $1 message_id,
	// $2 limit.
	OfMessage string
	// ClaimRedrive moves a parked letter without a revision (an empty
	// revision_id) to redriven and returns it (the letter columns); no row when it
	// is not parked or has a revision that may be out. On PostgreSQL the row
	// lock it takes is held until the transaction ends, so a concurrent
	// redrive of the same letter waits, then finds it no longer parked.
	// $1 id, $2 by (redriven_by, resolved_by), $3 now (redriven_at,
	// resolved_at), $4 redrive_reason.
	ClaimRedrive string
	// Discard moves a parked letter to discarded; affects 0 rows when it
	// is not parked. $1 id, $2 resolved_by, $3 resolved_at.
	Discard string
	// GetLocked reads one letter (the letter columns) and locks it until
	// the transaction ends (FOR UPDATE; SQLite's write transaction holds
	// the database). $1 id.
	GetLocked string
	// SetRevision records a revision about to be published on a parked
	// letter; affects 0 rows when it is not parked. $1 id, $2 revision_id,
	// $3 revision_payload, $4 revision_record_expires_at.
	SetRevision string
	// ResolveRevision moves a parked letter whose revision is $4 to
	// discarded, once that revision is published; affects 0 rows
	// otherwise. $1 id, $2 resolved_by, $3 resolved_at, $4 revision_id.
	ResolveRevision string
	// CountParked counts parked letters per consumer: consumer, count.
	// No arguments.
	CountParked string
	// CountClass counts the letters of one error class in any state:
	// $1 class. Returns count.
	CountClass string
	// CountParkedNoID counts, per consumer, the parked letters of messages
	// that came without a usable id (message_id beginning with $1, the
	// dlq.NoIDPrefix): consumer, count. $1 the prefix.
	CountParkedNoID string
	// Counts counts letters per state: state, count. No arguments.
	Counts string
	// Expire deletes up to $2 letters an operator resolved (redriven or
	// discarded) before $1; parked letters are never deleted. $1 horizon
	// (microseconds), $2 limit.
	Expire string
}
