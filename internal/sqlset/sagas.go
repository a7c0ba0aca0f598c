package sqlset

// Sagas holds the statements on the sagas and saga_steps tables (package
// saga). The saga reads, locks and fences the effect rows it schedules
// through package effect (effect.LockTx, effect.FenceTx, effect.Token);
// only Due joins the effects table (see there why).
//
// sagas columns: saga_id, name, fingerprint, input, state ('running',
// 'compensating', 'completed', 'compensated', 'held'), step, steps,
// current_key (the awaited effect), abort_requested (0/1), version,
// last_error, created_at, updated_at (microseconds). saga_steps (the
// barrier) columns: saga_id, step, op ('do', 'undo'), step_name, origin,
// outcome ('started', 'applied', 'null', 'refused'), result, created_at,
// updated_at.
//
// The statements that return sagas select, in this order: saga_id, name,
// state, step, steps, current_key, abort_requested, version, last_error,
// input, created_at, updated_at (the saga columns).
type Sagas struct {
	// Insert records a new running saga at step 0 and returns it (the
	// saga columns); no row when saga_id exists. $1 saga_id, $2 name,
	// $3 fingerprint, $4 input, $5 steps, $6 current_key, $7 now
	// (created_at, updated_at).
	Insert string
	// Get reads one saga (the saga columns). $1 saga_id.
	Get string
	// GetFingerprint reads one saga: the saga columns, then fingerprint.
	// $1 saga_id.
	GetFingerprint string
	// List reads up to $2 sagas, most recently updated first (the saga
	// columns). $1 state ('' = every state), $2 limit.
	List string
	// Counts counts sagas per state: state, count. No arguments.
	Counts string
	// Steps reads the barrier rows of a saga in step order, action before
	// compensation: step, step_name, op, origin, outcome, result,
	// created_at, updated_at. $1 saga_id.
	Steps string
	// Abort asks a running saga to compensate (abort_requested = 1,
	// version+1). $1 saga_id, $2 last_error, $3 now.
	Abort string
	// LockSaga reads state, step, steps, current_key, abort_requested of a
	// saga and locks its row until the transaction ends (PostgreSQL FOR
	// UPDATE; SQLite's write transaction holds the database lock already).
	// $1 saga_id.
	LockSaga string
	// Aborting reads state, abort_requested of a saga. $1 saga_id.
	Aborting string
	// Advance compare-and-sets a saga on its version: state, step,
	// current_key, last_error, abort_requested = 0, version+1. Affects 0
	// rows when another advancer moved first. $1 saga_id, $2 observed
	// version, $3 state, $4 step, $5 current_key, $6 last_error, $7 now.
	Advance string
	// Touch sets a saga's updated_at without moving it, so that Due lists
	// it after the others: one whose advance failed does not hold back
	// the batch. $1 saga_id, $2 observed version, $3 now.
	Touch string
	// Due reads up to $1 sagas of the definitions named in $2 (a JSON array
	// of names) to move on, oldest update first: running or
	// compensating ones whose awaited effect is completed or failed,
	// running ones asked to abort, held ones whose effect completed (the
	// active-state predicate matches sagas_active_idx). It returns the saga
	// columns, then the effect's state (empty when none), result and
	// last_error (empty when none).
	//
	// Due is the one statement of the saga on the effects table (read
	// only; package effect owns it): which sagas are due is a predicate on
	// the saga row and on its awaited effect's state together, so it is
	// one join. Split in two, the advancer would read every active saga,
	// those still waiting included, then their effects: a second round
	// trip per poll and a scan of the waiting sagas instead of a bounded
	// batch of due ones.
	Due string

	// InsertBarrier inserts a barrier row, doing nothing when (saga_id,
	// step, op) exists; affects 1 row when inserted. $1 saga_id, $2 step,
	// $3 op, $4 step_name, $5 origin, $6 outcome, $7 now.
	InsertBarrier string
	// GetBarrier reads origin, outcome, result of a barrier row. $1
	// saga_id, $2 step, $3 op.
	GetBarrier string
	// SetBarrier sets outcome and result of a barrier row whose outcome is
	// $7. $1 saga_id, $2 step, $3 op, $4 outcome, $5 result, $6 now, $7
	// the required current outcome.
	SetBarrier string
	// Results reads step_name, result of the applied actions of a saga.
	// $1 saga_id.
	Results string

	// ExpireSteps deletes up to $2 barrier rows of sagas that finished
	// (completed or compensated) before $1. $1 horizon (microseconds,
	// compared with updated_at, the finish time), $2 limit.
	ExpireSteps string
	// Expire deletes up to $2 sagas that finished before $1 and have no
	// barrier rows left (their steps go first, see ExpireSteps, so no step
	// row is ever left without its saga). Running, compensating and held
	// sagas are never deleted. $1 horizon (microseconds), $2 limit.
	Expire string
}
