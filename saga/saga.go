// Package saga composes the effect ledger into sagas: a saga is an id plus
// ordered steps, each an action and a compensation, and every action and
// every compensation is an effect in the ledger ([effect.Ledger]) whose key,
// derived from (saga id, step, do|undo), is handed to the provider as its
// idempotency key. Sagas do not remove the duplicate-call problem, they make
// it visible: a compensation ("refund the payment") that runs twice would
// create a new bug, so it carries a key of its own, exactly like the action.
//
//	checkout := saga.Definition[pgx.Tx]{Name: "checkout", Steps: []saga.Step[pgx.Tx]{
//		{Name: "reserve", DoTx: holdSeats, UndoTx: releaseSeats}, // local: in the barrier's transaction
//		{Name: "charge",
//			Do: func(ctx context.Context, c saga.Call) ([]byte, error) {
//				return psp.Charge(ctx, c.Key, c.Input) // c.Key = "saga/<id>/charge/do"
//			},
//			Undo: func(ctx context.Context, c saga.Call) ([]byte, error) {
//				return psp.Refund(ctx, c.Key, c.DoKey) // a key of its own; refunds what DoKey charged
//			}},
//	}}
//	sagas, err := saga.New(d, ledger, saga.Config{}, checkout) // ledger: *effect.Ledger[pgx.Tx]
//	_, started, err := sagas.StartTx(ctx, tx, "checkout", orderID, input) // with the order's rows
//	w, err := saga.NewWorker(sagas, saga.WorkerConfig[pgx.Tx]{})
//	err = idem.Run(ctx, w) // actions, then compensations in reverse order on a permanent failure
//
// Flow:
//
//   - [Sagas.StartTx] records the saga and schedules its first action inside
//     the caller's business transaction: both commit together or not at all.
//     Starting an id again with the same definition and input is the same
//     saga (started false); another definition or input under that id fails
//     with [ErrMismatch] (also [idem.ErrFingerprintMismatch]).
//   - A [Worker] runs an [effect.Worker] for the step kinds (lease, fencing
//     token, backoff, MaxAttempts, OnFailed: all the ledger's) and an
//     advancer that moves each saga on once the effect it waits for is
//     settled, in one transaction that compare-and-sets the saga row and
//     schedules the next effect.
//   - A permanent action failure, an action that exhausted its attempts, or
//     [Sagas.Abort] turns the saga to compensating: the compensation of the
//     step that failed (its action may have reached the provider anyway: a
//     time-out) and then those of the completed steps run, in reverse order.
//     A compensation that fails permanently or exhausts its attempts holds
//     the saga (state held, the effect failed in the ledger and, with
//     [effect.WorkerConfig.OnFailed], dead-lettered) for reconciliation; redriving
//     the effect ([effect.Ledger.Retry]) resumes it.
//
// The barrier (table {{t}}saga_steps, migration 0008_sagas): before an
// action or a compensation runs, it inserts its row (saga, step, do|undo) in
// a transaction of the same database, and the primary key decides the two
// races a compensation has with its action:
//
//   - a compensation that arrives before its action (the action timed out
//     or was never claimed, the saga was aborted) inserts the action's row
//     itself; it is recorded as a null compensation (nothing to undo, no
//     provider call) and the late action, finding its row taken, is refused;
//   - an action that arrives after its compensation finds the compensation's
//     row and is never applied.
//
// A compensation whose action's row exists may have something to undo; if
// that action is still in flight under a live lease, the compensation waits
// for it (retrying) so it never overtakes a call that is still running.
// A call still running after its lease ran out cannot be waited for: the
// ledger's CallTimeout (at most the Lease) bounds the client side of it, but
// a provider may still perform a request after the client gave up. An undo
// should therefore name what it undoes by the action's key ([Call.DoKey]),
// so the provider can refuse the late action (fakeprovider's refund cancels
// an unknown charge key).
//
// Steps are external ([Step.Do], [Step.Undo]: a call given [Call.Key]) or
// local ([Step.DoTx], [Step.UndoTx]: a change in the business database run
// inside the barrier transaction, so it happens exactly once). Every step
// runs under the ledger's lease; local changes commit only while the
// effect's fencing token is still the claimer's, and an external result is
// recorded by the ledger under the token, so a zombie worker's late result
// is rejected. Action results are stored (in the barrier row) and handed to
// later steps in [Call.Results].
//
// The tables are {{t}}sagas and {{t}}saga_steps; effects live in
// {{t}}effects (0004_effects), with keys "saga/<id>/<step>/do|undo" and kinds
// "saga:<name>:do|undo".
package saga

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/errtext"
	"github.com/idemkit/idem/internal/fingerprint"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Op is the half of a step: its action or its compensation.
type Op string

// The two halves of a step.
const (
	Do   Op = "do"
	Undo Op = "undo"
)

// State is the lifecycle state of a saga.
type State string

// The states of a saga.
const (
	Running      State = "running"      // actions run forward
	Compensating State = "compensating" // compensations run backward
	Completed    State = "completed"    // every action applied
	Compensated  State = "compensated"  // every compensation done
	Held         State = "held"         // a compensation failed: reconcile, then redrive its effect
)

// Outcomes of a barrier row ([StepRecord.Outcome]).
const (
	OutcomeStarted = "started" // the row is in; an external call may have reached the provider
	OutcomeApplied = "applied" // the result is recorded
	OutcomeNull    = "null"    // a compensation that found nothing to undo (its action never started)
	OutcomeRefused = "refused" // an action row taken by its compensation: the action is never applied
)

// Errors of this package; errors.Is matches them.
var (
	// ErrMismatch reports a start of an existing saga id with another
	// definition or input. The error also matches
	// [idem.ErrFingerprintMismatch].
	ErrMismatch = errors.New("saga: id reused with another definition or input")
	// ErrUnknownDefinition reports a saga name that was not defined.
	ErrUnknownDefinition = errors.New("saga: unknown definition")
	// ErrNotRunning reports an Abort of a saga that no longer runs forward.
	ErrNotRunning = errors.New("saga: not running")
	// ErrLastStepApplied reports an Abort refused because the action of the
	// saga's last step applied: it completes, it is not compensated. The
	// error also matches [ErrNotRunning].
	ErrLastStepApplied = fmt.Errorf("%w: its last step applied", ErrNotRunning)
	// ErrActionInFlight is the transient error of a compensation that waits
	// for its action, still in flight under a live lease.
	ErrActionInFlight = errors.New("saga: action still in flight")
)

// Call is what a step's action or compensation receives.
type Call struct {
	SagaID string
	Saga   string // definition name
	Step   string // step name
	Index  int    // step index, 0-based
	Op     Op
	// Key is the idempotency key of this half of the step, derived from
	// (saga id, step, op); hand it to the provider.
	Key string
	// DoKey is the key of the step's action; a compensation uses it to name
	// what it undoes (e.g. refund the charge made under DoKey).
	DoKey string
	Input []byte
	// Results are the stored results of the actions applied so far, by step
	// name (for a compensation: including its own action's, if applied).
	Results map[string][]byte
}

// Step is one step of a saga: exactly one of Do and DoTx, at most one of
// Undo and UndoTx (none: nothing to undo, but the barrier still refuses a
// late action once the saga compensates).
type Step[TTx any] struct {
	// Name identifies the step in keys; lower-case letters, digits, '.',
	// '_' and '-', at most 40 bytes, unique in the definition.
	Name string
	// Do is an external action: call the provider with c.Key as the
	// idempotency key. Errors follow [effect.Performer]: [idem.Permanent]
	// fails the step, others are retried with backoff.
	Do func(ctx context.Context, c Call) ([]byte, error)
	// DoTx is a local action run inside the barrier transaction tx (commit
	// together, exactly once). Keep it short: the transaction holds the row
	// lock of the step's effect (PostgreSQL) or the write lock (SQLite).
	DoTx func(ctx context.Context, tx TTx, c Call) ([]byte, error)
	// Undo is an external compensation, called with c.Key (the undo key).
	// It must succeed when there is nothing to undo.
	Undo func(ctx context.Context, c Call) ([]byte, error)
	// UndoTx is a local compensation run inside its barrier transaction.
	UndoTx func(ctx context.Context, tx TTx, c Call) ([]byte, error)
}

// Definition is a named, ordered list of steps.
type Definition[TTx any] struct {
	// Name identifies the definition; the same rules as step names.
	Name  string
	Steps []Step[TTx]
	// OnDone, if set, runs in the transaction that finishes a saga (state
	// Completed or Compensated in sg), so the business records the outcome
	// (an order failed, say) atomically with it, whichever compensations
	// were null. An error (or a panic, recovered and logged with its
	// stack) rolls the transition back; it is retried on the next advance.
	OnDone func(ctx context.Context, tx TTx, sg Saga) error
}

// Saga is a stored saga.
type Saga struct {
	ID             string
	Name           string
	State          State
	Step           int // index of the step whose action or compensation is awaited
	Steps          int
	CurrentKey     string // the effect awaited
	AbortRequested bool
	LastError      string // at most 4 KiB (cut on a rune), invalid UTF-8 as U+FFFD, NUL removed
	Input          []byte
	CreatedAt      time.Time
	UpdatedAt      time.Time

	version int64
}

// StepRecord is one barrier row.
type StepRecord struct {
	Index     int
	Name      string
	Op        Op
	Origin    Op     // who inserted the row: Undo for a null compensation's action row
	Outcome   string // OutcomeStarted, OutcomeApplied, OutcomeNull or OutcomeRefused
	Result    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Config configures [New].
type Config struct {
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings. Defaults to slog.Default().
	Logger *slog.Logger
}

// Sagas starts, reads and aborts sagas in one store. It is safe for
// concurrent use.
type Sagas[TTx any] struct {
	d    store.Driver[TTx]
	l    *effect.Ledger[TTx]
	cfg  Config
	log  *slog.Logger
	q    sqlset.Sagas
	defs map[string]*def[TTx]
}

type def[TTx any] struct {
	Definition[TTx]
	fp []byte
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,39}$`)

// MaxIDLen is the longest saga id: keys "saga/<id>/<step>/undo" must fit the
// ledger's key limit.
const MaxIDLen = 200

// New returns Sagas on d and the ledger l (on the same driver) with the
// definitions defs; migrations 0004_effects and 0008_sagas must be applied.
// Reading (Get, List, Steps) needs no definitions.
func New[TTx any](d store.Driver[TTx], l *effect.Ledger[TTx], cfg Config, defs ...Definition[TTx]) (*Sagas[TTx], error) {
	if d == nil || l == nil {
		return nil, checks.Optionf("saga: nil driver or ledger")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sagas[TTx]{d: d, l: l, cfg: cfg, log: obs.Component(cmp.Or(cfg.Logger, slog.Default()), "saga"), q: d.Statements().Sagas, defs: map[string]*def[TTx]{}}
	for _, df := range defs {
		if err := validate(df); err != nil {
			return nil, err
		}
		if _, dup := s.defs[df.Name]; dup {
			return nil, checks.Optionf("saga: definition %q twice", df.Name)
		}
		parts := [][]byte{[]byte("saga"), []byte(df.Name)}
		for _, st := range df.Steps {
			parts = append(parts, []byte(st.Name))
		}
		s.defs[df.Name] = &def[TTx]{Definition: df, fp: idem.FingerprintOf(parts...).Bytes()}
	}
	return s, nil
}

func validate[TTx any](df Definition[TTx]) error {
	if !nameRe.MatchString(df.Name) {
		return checks.Optionf("saga: definition name %q: want [a-z0-9][a-z0-9._-]{0,39}", df.Name)
	}
	if len(df.Steps) == 0 {
		return checks.Optionf("saga: definition %q has no steps", df.Name)
	}
	seen := map[string]bool{}
	for i, st := range df.Steps {
		switch {
		case !nameRe.MatchString(st.Name):
			return checks.Optionf("saga: %s step %d name %q: want [a-z0-9][a-z0-9._-]{0,39}", df.Name, i, st.Name)
		case seen[st.Name]:
			return checks.Optionf("saga: %s: step %q twice", df.Name, st.Name)
		case (st.Do == nil) == (st.DoTx == nil):
			return checks.Optionf("saga: %s step %q needs exactly one of Do and DoTx", df.Name, st.Name)
		case st.Undo != nil && st.UndoTx != nil:
			return checks.Optionf("saga: %s step %q has both Undo and UndoTx", df.Name, st.Name)
		}
		seen[st.Name] = true
	}
	return nil
}

// Key returns the idempotency key of op of step in saga id:
// "saga/<id>/<step>/<op>".
func Key(id, step string, op Op) string { return "saga/" + id + "/" + step + "/" + string(op) }

func kindOf(name string, op Op) string { return "saga:" + name + ":" + string(op) }

// payload is the effect payload of one half of a step.
type payload struct {
	Saga string `json:"saga"`
	Step int    `json:"step"`
	Op   Op     `json:"op"`
}

// schedule records the effect of op of step i in tx.
func (s *Sagas[TTx]) schedule(ctx context.Context, tx TTx, df *def[TTx], id string, i int, op Op) (string, error) {
	key := Key(id, df.Steps[i].Name, op)
	p, _ := json.Marshal(payload{Saga: id, Step: i, Op: op})
	if _, _, err := s.l.ScheduleTx(ctx, tx, effect.Effect{Key: key, Kind: kindOf(df.Name, op), Payload: p}); err != nil {
		return "", err
	}
	return key, nil
}

func (s *Sagas[TTx]) fingerprint(df *def[TTx], input []byte) []byte {
	return idem.FingerprintOf(df.fp, fpmatch.Payload(input).Bytes()).Bytes()
}

// StartTx starts saga id of definition name with input inside the caller's
// transaction tx: the saga row and its first action's effect are written in
// tx, so they commit (or roll back) with the business change. It returns the
// stored saga and whether this call created it.
//
// Duplicate starts: the same id with the same definition and input is one
// saga (started false, nothing written); concurrent starts serialise on the
// primary key. Another definition or input fails with an error matching
// [ErrMismatch] and [idem.ErrFingerprintMismatch]; nothing is written.
func (s *Sagas[TTx]) StartTx(ctx context.Context, tx TTx, name, id string, input []byte) (Saga, bool, error) {
	df, ok := s.defs[name]
	if !ok {
		return Saga{}, false, fmt.Errorf("saga %q: %w: %q", id, ErrUnknownDefinition, name)
	}
	if err := checks.ID(id); err != nil {
		return Saga{}, false, fmt.Errorf("saga: id: %w", err)
	}
	if len(id) > MaxIDLen {
		return Saga{}, false, fmt.Errorf("saga: %w: id of %d bytes exceeds %d", idem.ErrInvalidInput, len(id), MaxIDLen)
	}
	if input == nil {
		input = []byte{}
	}
	fp := s.fingerprint(df, input)
	q := s.d.Tx(tx)
	now := store.Micros(s.cfg.Now())
	first := Key(id, df.Steps[0].Name, Do)
	for range 10 {
		got, err := scanSaga(q.QueryRow(ctx, s.q.Insert, id, name, fp, input, len(df.Steps), first, now))
		if err == nil {
			if _, err := s.schedule(ctx, tx, df, id, 0, Do); err != nil {
				return Saga{}, false, fmt.Errorf("saga %q: %w", id, err)
			}
			return got, true, nil
		}
		if !errors.Is(err, store.ErrNoRows) {
			return Saga{}, false, fmt.Errorf("saga: start %q: %w", id, err)
		}
		var storedFP []byte
		got, err = scanSaga(q.QueryRow(ctx, s.q.GetFingerprint, id), &storedFP)
		if errors.Is(err, store.ErrNoRows) {
			continue
		}
		if err != nil {
			return Saga{}, false, fmt.Errorf("saga: start %q: %w", id, err)
		}
		if string(storedFP) != string(fp) {
			st, _ := fingerprint.FromBytes(storedFP)
			rc, _ := fingerprint.FromBytes(fp)
			return Saga{}, false, fmt.Errorf("saga %q (stored %s, started as %s): %w: %w", id, got.Name, name, ErrMismatch,
				&idem.FingerprintMismatchError{Key: "saga/" + id, Stored: st, Received: rc})
		}
		return got, false, nil
	}
	return Saga{}, false, fmt.Errorf("saga: start %q: row keeps vanishing", id)
}

// Start is StartTx in a transaction of its own.
func (s *Sagas[TTx]) Start(ctx context.Context, name, id string, input []byte) (Saga, bool, error) {
	var (
		sg      Saga
		created bool
	)
	err := store.InTx(ctx, s.d, func(tx TTx) error {
		var err error
		sg, created, err = s.StartTx(ctx, tx, name, id, input)
		return err
	})
	return sg, created, err
}

// Abort asks a running saga to compensate: the advancer turns it to
// compensating from the step it is at (that step's action may be pending,
// in flight or done; the barrier sorts it out). It fails with
// [ErrNotRunning] once the saga finished or compensates, with
// [ErrLastStepApplied] (which also matches ErrNotRunning) once the action of
// its last step applied (the saga succeeded; only the advancer has not
// recorded it yet), and [idem.ErrNotFound] for an unknown id.
//
// Serialisation: Abort runs in one transaction that locks the saga row and
// then the row of the effect the saga awaits (PostgreSQL FOR UPDATE; SQLite
// write transactions are serial). A step holds that effect row's lock too:
// a local action (DoTx) from its fence to its commit, the ledger while it
// records an external action's result. So exactly one of them goes first,
// decided by the lock, never by timing:
//
//   - the step first: Abort waits for its commit, then reads the committed
//     outcome; when that is the last step's action applied (its barrier
//     row) or completed (its effect), Abort is refused. An intermediate
//     step's applied action is compensated.
//   - Abort first: the abort request commits before the step's transaction
//     gets the lock; a local action then reads it and is refused (nothing
//     applied, a null compensation follows), and an external action's
//     result is compensated.
func (s *Sagas[TTx]) Abort(ctx context.Context, id, reason string) error {
	return store.InTx(ctx, s.d, func(tx TTx) error {
		q := s.d.Tx(tx)
		var (
			state, key          string
			step, steps, abortq int64
		)
		err := q.QueryRow(ctx, s.q.LockSaga, id).Scan(&state, &step, &steps, &key, &abortq)
		if errors.Is(err, store.ErrNoRows) {
			return fmt.Errorf("saga %q: %w", id, idem.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("saga: abort %q: %w", id, err)
		}
		if State(state) != Running {
			return fmt.Errorf("saga %q is %s: %w", id, state, ErrNotRunning)
		}
		// Wait for (or keep out) the step that holds the awaited effect.
		eState, _, err := effect.LockTx(ctx, s.d, tx, key)
		if err != nil {
			return fmt.Errorf("saga: abort %q: %w", id, err)
		}
		if abortq == 0 && step == steps-1 {
			if eState == effect.Completed {
				return fmt.Errorf("saga %q: %w", id, ErrLastStepApplied)
			}
			var origin, outcome string
			var res []byte
			err := q.QueryRow(ctx, s.q.GetBarrier, id, step, string(Do)).Scan(&origin, &outcome, &res)
			if err != nil && !errors.Is(err, store.ErrNoRows) {
				return fmt.Errorf("saga: abort %q: barrier: %w", id, err)
			}
			if err == nil && Op(origin) == Do && outcome == OutcomeApplied {
				return fmt.Errorf("saga %q: %w", id, ErrLastStepApplied)
			}
		}
		n, err := q.Exec(ctx, s.q.Abort, id, errtext.Clean("aborted: "+reason), store.Micros(s.cfg.Now()))
		if err != nil {
			return fmt.Errorf("saga: abort %q: %w", id, err)
		}
		if n == 0 { // unreachable under the row lock; kept as a guard
			return fmt.Errorf("saga %q: %w", id, ErrNotRunning)
		}
		return nil
	})
}

// Get returns saga id, or an error wrapping [idem.ErrNotFound].
func (s *Sagas[TTx]) Get(ctx context.Context, id string) (Saga, error) {
	sg, err := scanSaga(s.d.Pool().QueryRow(ctx, s.q.Get, id))
	if errors.Is(err, store.ErrNoRows) {
		return Saga{}, fmt.Errorf("saga %q: %w", id, idem.ErrNotFound)
	}
	if err != nil {
		return Saga{}, fmt.Errorf("saga: get %q: %w", id, err)
	}
	return sg, nil
}

// List returns up to limit sagas, most recently updated first; state ""
// lists every state.
func (s *Sagas[TTx]) List(ctx context.Context, state State, limit int) ([]Saga, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.d.Pool().Query(ctx, s.q.List, string(state), limit)
	if err != nil {
		return nil, fmt.Errorf("saga: list: %w", err)
	}
	defer rows.Close()
	var out []Saga
	for rows.Next() {
		sg, err := scanSaga(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sg)
	}
	return out, rows.Err()
}

// Counts returns the number of sagas per stored state; states without
// sagas are absent.
func (s *Sagas[TTx]) Counts(ctx context.Context) (map[State]int64, error) {
	c, err := operator.SagaCounts(ctx, s.d)
	if err != nil {
		return nil, err
	}
	out := make(map[State]int64, len(c))
	for st, n := range c {
		out[State(st)] = n
	}
	return out, nil
}

// Steps returns the barrier rows of saga id in step order, action before
// compensation.
func (s *Sagas[TTx]) Steps(ctx context.Context, id string) ([]StepRecord, error) {
	rows, err := s.d.Pool().Query(ctx, s.q.Steps, id)
	if err != nil {
		return nil, fmt.Errorf("saga: steps %q: %w", id, err)
	}
	defer rows.Close()
	var out []StepRecord
	for rows.Next() {
		var (
			r            StepRecord
			op, origin   string
			created, upd int64
			idx          int64
		)
		if err := rows.Scan(&idx, &r.Name, &op, &origin, &r.Outcome, &r.Result, &created, &upd); err != nil {
			return nil, err
		}
		r.Index, r.Op, r.Origin = int(idx), Op(op), Op(origin)
		r.CreatedAt, r.UpdatedAt = store.FromMicros(created), store.FromMicros(upd)
		out = append(out, r)
	}
	return out, rows.Err()
}

func scanSaga(r store.Row, extra ...any) (Saga, error) {
	var (
		s                  Saga
		state              string
		step, steps, abort int64
		created, upd       int64
	)
	dest := append([]any{&s.ID, &s.Name, &state, &step, &steps, &s.CurrentKey, &abort, &s.version, &s.LastError, &s.Input, &created, &upd}, extra...)
	if err := r.Scan(dest...); err != nil {
		return Saga{}, err
	}
	s.State, s.Step, s.Steps, s.AbortRequested = State(state), int(step), int(steps), abort != 0
	s.CreatedAt, s.UpdatedAt = store.FromMicros(created), store.FromMicros(upd)
	return s, nil
}
