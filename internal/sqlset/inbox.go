package sqlset

// Inbox holds the statements on the inbox table (package inbox).
//
// Columns: consumer, message_id (the primary key), fingerprint (the
// payload's canonical fingerprint, 32 bytes), state (lease.InProgress,
// lease.Completed or lease.Failed), token and attempts (the lease's fencing
// token and claim count), lease_until, received_at, processed_at and
// expires_at (microseconds).
type Inbox struct {
	// Insert records a delivered message as completed, doing nothing when
	// (consumer, message_id) exists. Affects 1 row when new, 0 otherwise.
	// $1 consumer, $2 message_id, $3 fingerprint, $4 received_at (also
	// processed_at), $5 expires_at.
	Insert string
	// InsertStrict is Insert without ON CONFLICT, for the one-round-trip
	// begin+insert (store.Driver.BeginInsert): a duplicate is a unique
	// violation. Same arguments as Insert.
	InsertStrict string
	// Select reads one record: fingerprint, state, token, lease_until,
	// attempts. $1 consumer, $2 message_id.
	Select string
	// Lookup reads the state and expires_at of one record (for the owner's
	// StateOf and ExpiryOf). $1 consumer, $2 message_id.
	Lookup string
	// Delete removes one record (a batch message whose handler failed).
	// $1 consumer, $2 message_id.
	Delete string

	// Claim records a message in_progress under a lease with token 1 and
	// attempts 1, doing nothing when the record exists. $1 consumer,
	// $2 message_id, $3 fingerprint, $4 lease_until, $5 received_at,
	// $6 expires_at.
	Claim string
	// TakeOver moves an in_progress record whose lease ended to a new
	// lease (token+1, attempts+1), fenced on the token read; returns token,
	// attempts (no row: another owner moved first). $1 consumer,
	// $2 message_id, $3 token read, $4 new lease_until, $5 now.
	TakeOver string
	// Complete marks the claimed record completed. Fenced: $1 consumer,
	// $2 message_id, $3 token, $4 processed_at.
	Complete string
	// Extend moves the lease's end. Fenced: $1 consumer, $2 message_id,
	// $3 token, $4 lease_until.
	Extend string
	// Release deletes the claimed record. Fenced: $1 consumer,
	// $2 message_id, $3 token.
	Release string
	// Fail marks the claimed record failed. Fenced: $1 consumer,
	// $2 message_id, $3 token, $4 processed_at.
	Fail string
	// Abandoned lists in_progress records of a consumer whose lease ended,
	// oldest lease first: message_id, token, attempts, lease_until,
	// received_at. $1 consumer, $2 now, $3 limit.
	Abandoned string

	// BatchInsert records n messages of one consumer as completed, doing
	// nothing for those that exist, and returns the message_id of each
	// row inserted. $1 consumer, $2 received_at (also processed_at),
	// $3 expires_at, then for message i (0-based) $(4+2i) message_id and
	// $(5+2i) fingerprint.
	BatchInsert func(n int) string
	// BatchInsertStrict is BatchInsert without ON CONFLICT, for drivers
	// that pipeline: an all-new batch (the common case) is recorded without
	// the speculative insertion ON CONFLICT pays per row (an index probe
	// and one more WAL record), and a batch holding a recorded message
	// fails with a unique violation, rolled back to BatchStrictSavepoint
	// and sent again as BatchInsert. Same arguments and result.
	BatchInsertStrict func(n int) string
	// BatchStrictSavepoint opens the savepoint BatchInsertStrict runs
	// under; BatchStrictRelease releases it; BatchStrictRollback rolls
	// back to it after a unique violation (then BatchStrictRelease). One
	// statement each, sent in a pipeline; no arguments.
	BatchStrictSavepoint, BatchStrictRelease, BatchStrictRollback string
	// BatchSelect reads the records of n messages of one consumer:
	// message_id, fingerprint, state. $1 consumer, then $2…$(n+1)
	// message_id.
	BatchSelect func(n int) string

	// BatchSavepoint opens the savepoint of a batch's fast pass (all new
	// messages' handlers together). No arguments.
	BatchSavepoint string
	// BatchSavepointRelease releases it after the pass succeeded.
	BatchSavepointRelease string
	// BatchSavepointRollback rolls the pass back to it and releases it
	// (one round trip). No arguments.
	BatchSavepointRollback string
	// Savepoint opens the savepoint of one message of a batch's replay.
	Savepoint string
	// SavepointNext releases the previous message's savepoint and opens
	// the next one's, in one round trip. No arguments.
	SavepointNext string
	// SavepointRollback rolls back to the current message's savepoint.
	SavepointRollback string
	// SavepointRelease releases the last message's savepoint.
	SavepointRelease string

	// Expire deletes at most a batch of records whose expires_at passed.
	// $1 horizon (expires_at < $1), $2 the most rows to delete.
	Expire string
	// ExpireKeeping is Expire sparing, for n consumers, the records
	// received since a given time. $1 horizon, then for consumer i
	// (0-based) $(2+2i) consumer and $(3+2i) the received_at from which
	// its records are kept, then $(2+2n) the most rows to delete.
	ExpireKeeping func(n int) string
	// CountByState counts the records per state: state, count. No
	// arguments.
	CountByState string
	// CountByConsumer counts the records per consumer: consumer, count.
	// No arguments.
	CountByConsumer string
}
