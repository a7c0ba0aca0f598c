package sqlset

// HTTPKeys holds the statements on the idempotency_keys table (package
// idemhttp).
//
// Unless a field says otherwise, $1 is the tenant, $2 the operation and $3
// the key: the record's primary key. Every statement that starts or takes
// over an execution is fenced: the insert goes through the primary key (ON
// CONFLICT DO NOTHING), and every later write names the fencing token it
// read. A record's first token is its created_at (microseconds), not a
// constant: a record deleted (Forget, ReleaseHeld, Release) and created
// again must not give a late writer of the old one its token back. Records
// read by Load and ListHeld have the columns, in order:
// fingerprint, state, token, status, headers, body, body_omitted,
// resource_type, resource_id, created_at, locked_until, completed_at,
// expires_at.
type HTTPKeys struct {
	// Insert creates an in_progress record with token $5: $4 fingerprint,
	// $5 created_at, $6 locked_until, $7 expires_at. Returns (token, text)
	// or no row on conflict.
	Insert string
	// InsertLocked is Insert inside the request transaction, bounding the
	// wait on the primary key: it first sets the transaction's lock
	// timeout to $8 (text, e.g. "500ms"), and restores the previous value
	// in RETURNING once the row is inserted. Returns (token, text). Empty
	// where writers never wait on a row lock (SQLite's BEGIN IMMEDIATE):
	// Insert is used instead, without $8.
	InsertLocked string
	// InsertStrict is InsertLocked without ON CONFLICT, for the pipelined
	// BEGIN+INSERT (store.Driver.BeginInsert): a conflict is a unique
	// violation. Same arguments as InsertLocked. Empty where there is no
	// InsertLocked.
	InsertStrict string
	// Load reads one record (the columns above).
	Load string
	// LockKey, one statement, takes the session-level advisory lock $4
	// (bigint, the hash of the scope the middleware computes), waiting at
	// most $5 (text, e.g. "500ms"; lock_timeout, local to the statement's
	// implicit transaction), and then reads the record (the columns of
	// Load) with a snapshot taken after the lock was granted, so it sees
	// the work of the previous holder, which released the lock only after
	// its COMMIT. When a record exists the statement releases the lock
	// before returning it, so the lock stays held exactly when there is no
	// row; when it fails after taking the lock, it releases it. Empty
	// where there are no advisory locks (SQLite's BEGIN IMMEDIATE
	// serialises writers).
	LockKey string
	// Unlock releases the session lock $1 (LockKey's $4). Empty where
	// LockKey is.
	Unlock string
	// InsertCompleted inserts the completed record of an execution that
	// found no record, without ON CONFLICT: a record inserted meanwhile by
	// a writer that does not take LockKey is a unique violation, so the
	// primary key decides. $4 fingerprint, $5 status, $6 headers (JSON
	// text), $7 body, $8 body_omitted (0/1), $9 resource_type, $10
	// resource_id, $11 created_at, $12 completed_at, $13 expires_at;
	// token $11, locked_until 0.
	InsertCompleted string
	// TakeOver re-arms, as in_progress with token+1 and no stored
	// response, a record past its retention or — when $10 = 1 — an
	// in_progress record whose lease expired: $4 the token read, $5
	// fingerprint, $6 created_at, $7 locked_until, $8 expires_at, $9 now,
	// $10 1 to allow the lease take-over (0 otherwise). Returns (token,
	// text) or no row when the record changed meanwhile.
	TakeOver string
	// TakeOverLocked is TakeOver inside the request transaction after
	// InsertLocked: it also restores the lock timeout in RETURNING. Same
	// arguments and result. Empty where InsertLocked is.
	TakeOverLocked string
	// Hold marks an in_progress record whose lease expired failed, held for
	// reconciliation (Hold policy), token+1: $4 the token read, $5 now.
	// Affects no row when the record changed meanwhile.
	Hold string
	// Complete stores the response of the execution holding the token: $4
	// token, $5 status, $6 headers (JSON text), $7 body, $8 body_omitted
	// (0/1), $9 resource_type, $10 resource_id, $11 completed_at.
	// expires_at is left as the claim set it, so the update touches no
	// indexed column (a cheap HOT update on PostgreSQL). Affects no row when
	// the lease was lost.
	Complete string
	// Release deletes the in_progress record of the execution holding the
	// token (its response is not stored): $4 token.
	Release string
	// Forget deletes a record (operator action) unless it is in progress
	// with a live lease: $4 now.
	Forget string
	// ListHeld lists up to $1 records held for reconciliation (state
	// failed), oldest first: tenant, operation, key and then the columns
	// above.
	ListHeld string
	// ResolveHeld completes a held record with an operator's response,
	// token+1: $4 status, $5 headers (JSON text), $6 body, $7 completed_at.
	// Affects no row when the record is not held.
	ResolveHeld string
	// ReleaseHeld deletes a held record. Affects no row when it is not
	// held.
	ReleaseHeld string
	// Expire deletes at most $2 records whose expires_at is before $1
	// (horizon, micros), whatever their state.
	Expire string
	// Counts returns (state, count) for every stored state.
	Counts string
}
