package sqlset

// Effects holds the statements on the effects table (package effect).
//
// Columns: effect_key (the primary key), kind, payload, fingerprint (32
// bytes: scheduled kind+payload, or the one inline fingerprint of
// Ledger.Do), state (lease.Pending, lease.InProgress, lease.Completed or
// lease.Failed), attempts and token (the claim count and fencing token),
// lease_until, next_attempt_at, result, last_error, created_at,
// updated_at, completed_at, expires_at (0: kept), traceparent, tracestate,
// first_attempt_at and held_at (microseconds; held_at > 0 on an
// in_progress row: held for reconciliation, never claimed).
//
// Statements documented as "returning an effect" return the columns
// effect_key, kind, payload, fingerprint, state, attempts, token,
// lease_until, next_attempt_at, result, last_error, created_at, updated_at,
// completed_at, expires_at, traceparent, tracestate, first_attempt_at,
// held_at, in that order.
type Effects struct {
	// Schedule records a scheduled effect pending, doing nothing when the
	// key exists; returning an effect when inserted (no row otherwise).
	// $1 effect_key, $2 kind, $3 payload, $4 fingerprint,
	// $5 next_attempt_at, $6 now (created_at, updated_at), $7 traceparent,
	// $8 tracestate.
	Schedule string
	// Get reads one effect; returning an effect. $1 effect_key.
	Get string
	// Insert records an inline (Ledger.Do) effect in_progress under a
	// lease with token 1 and attempts 1, doing nothing when the key
	// exists; returning an effect when inserted (no row otherwise).
	// $1 effect_key, $2 fingerprint, $3 lease_until (also
	// next_attempt_at), $4 now (created_at, updated_at), $5 payload.
	Insert string
	// TakeOver moves a pending or in_progress effect to a new lease
	// (token+1, attempts+1), fenced on the token read; returning an effect
	// (no row: another owner moved first). $1 effect_key, $2 token read,
	// $3 lease_until (also next_attempt_at), $4 now.
	TakeOver string
	// Claim leases up to $2 due effects of one kind (pending, or
	// in_progress with the lease ended, and not held): each gets token+1,
	// attempts+1, the new lease and, on its first claim,
	// first_attempt_at; returning the effects claimed. Concurrent claimers
	// never claim one row twice nor wait for each other (PostgreSQL: FOR
	// UPDATE SKIP LOCKED; SQLite: one writer). $1 now, $2 limit,
	// $3 lease_until (also next_attempt_at), $4 kind.
	Claim string
	// Complete records the result of the claimed effect. Fenced:
	// $1 effect_key, $2 token, $3 result, $4 now (completed_at,
	// updated_at), $5 expires_at (0: kept).
	Complete string
	// CompleteBatch records the results of many claimed effects in one
	// statement, each fenced by its own token exactly like Complete. The
	// effects travel as parallel arrays of one element per effect:
	// $1 effect_key, $2 token, $3 result; then $4 now (completed_at,
	// updated_at), $5 expires_at (0: kept). Returns effect_key of each
	// effect recorded: a key missing from the result lost its lease (taken
	// over, or settled). Empty where the dialect has no arrays: the
	// completions are then Complete statements sent in one batch.
	CompleteBatch string
	// Release hands the claimed effect back to pending, due at $3.
	// Fenced: $1 effect_key, $2 token, $3 next_attempt_at, $4 last_error,
	// $5 now, $6 attempts to subtract (0, or 1 for an attempt not counted).
	Release string
	// Fail marks the claimed effect failed; returning an effect. Fenced:
	// $1 effect_key, $2 token, $3 last_error, $4 now.
	Fail string
	// Hold holds the claimed effect for reconciliation: it stays
	// in_progress with no lease and its attempt is not counted. Fenced:
	// $1 effect_key, $2 token, $3 now (held_at, updated_at), $4 last_error.
	Hold string
	// Redrive makes a failed effect, or one in_progress whose lease ended
	// (held included), pending and due at once with its attempts reset; a
	// held one starts a new key lifetime (first_attempt_at 0), a failed
	// one keeps its first attempt. $1 effect_key, $2 now.
	Redrive string
	// Resolve marks a pending, failed, or abandoned in_progress effect
	// completed with a result an operator supplied. $1 effect_key,
	// $2 result, $3 now, $4 expires_at (0: kept).
	Resolve string
	// ListState lists effects in one state, oldest update first;
	// returning effects. $1 state, $2 limit.
	ListState string
	// ListHeld lists held effects, oldest hold first; returning effects.
	// $1 limit.
	ListHeld string

	// Expire deletes at most a batch of completed effects whose
	// expires_at (when set) passed. $1 horizon (expires_at < $1), $2 the
	// most rows to delete.
	Expire string
	// CountByState counts the effects per state: state, count. No
	// arguments.
	CountByState string
	// CountHeld counts the held effects per kind: kind, count. No
	// arguments.
	CountHeld string
	// CountAbandoned counts the in_progress effects whose lease ended (held
	// ones, which have none, included): $1 now. Returns count.
	CountAbandoned string
	// CountByKind counts the effects per kind, every state: kind, count. No
	// arguments.
	CountByKind string

	// Lock reads the state of an effect and locks its row until the
	// transaction ends, the row lock Complete and TakeOver take too
	// (PostgreSQL FOR UPDATE; SQLite's write transaction holds the database
	// lock already). No row when the effect does not exist. $1 effect_key.
	Lock string
	// Fence locks the row of a claimed effect like Lock and proves the token
	// is still the claimer's: affects 1 row when the effect is in_progress
	// under $2, 0 rows otherwise. $1 effect_key, $2 token.
	Fence string
	// Token reads the fencing token of an in_progress effect: token. No row
	// when the effect is not in_progress. $1 effect_key.
	Token string
}
