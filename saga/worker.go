package saga

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/errtext"
	"github.com/idemkit/idem/internal/panics"
	"github.com/idemkit/idem/store"
)

// The results stored for halves that made no call.
var (
	// nullResult is the result of a null compensation: {"saga":"null-compensation"}.
	nullResult = []byte(`{"saga":"null-compensation"}`)
	// refusedResult is the result of an action refused by the barrier: {"saga":"refused"}.
	refusedResult = []byte(`{"saga":"refused"}`)
)

// WorkerConfig configures a Worker.
type WorkerConfig[TTx any] struct {
	// Effect configures the underlying [effect.Worker] that performs the
	// steps: Concurrency, PollInterval, MaxAttempts (of an action), Backoff,
	// Logger, TracerProvider (the steps' idem.effect.call spans) and
	// Observer. Its OnFailed runs only for compensations (an action that
	// fails is compensated, not dead-lettered): plug the dead-letter store
	// there; it runs in the transaction that marks the compensation failed,
	// and the saga is then held.
	Effect effect.WorkerConfig[TTx]
	// UndoMaxAttempts is the number of attempts of a compensation before it
	// fails and holds the saga. Defaults to 3 × Effect.MaxAttempts (10).
	UndoMaxAttempts int
	// PollInterval is how often the advancer looks for sagas to move on.
	// Defaults to Effect.PollInterval, or 1 second.
	PollInterval time.Duration
	// Batch is the most sagas advanced per poll. Defaults to 100.
	Batch int
}

// Worker performs the steps of the defined sagas and advances them. Several
// Workers (in one or many processes) may run on one store: steps are claimed
// through the ledger, and each advance is a compare-and-set on the saga row.
type Worker[TTx any] struct {
	s     *Sagas[TTx]
	ew    *effect.Worker[TTx]
	cfg   WorkerConfig[TTx]
	names string // the definitions' names, a JSON array (Due's $2)
}

// NewWorker returns a Worker for every definition of s.
func NewWorker[TTx any](s *Sagas[TTx], cfg WorkerConfig[TTx]) (*Worker[TTx], error) {
	if s == nil {
		return nil, checks.Optionf("saga: nil Sagas")
	}
	if len(s.defs) == 0 {
		return nil, checks.Optionf("saga: no definitions")
	}
	maxAttempts := cmp.Or(cfg.Effect.MaxAttempts, 10)
	cfg.UndoMaxAttempts = cmp.Or(cfg.UndoMaxAttempts, 3*maxAttempts)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, cfg.Effect.PollInterval, time.Second)
	cfg.Batch = cmp.Or(cfg.Batch, 100)
	if cfg.UndoMaxAttempts < 0 || cfg.PollInterval < 0 || cfg.Batch < 0 {
		return nil, checks.Optionf("saga: negative UndoMaxAttempts, PollInterval or Batch")
	}
	ecfg := cfg.Effect
	if hook := cfg.Effect.OnFailed; hook != nil {
		ecfg.OnFailed = func(ctx context.Context, tx TTx, e effect.Effect, cause error) error {
			if !strings.HasSuffix(e.Kind, ":"+string(Undo)) {
				return nil
			}
			return hook(ctx, tx, e, cause)
		}
	}
	ew, err := effect.NewWorker(s.l, ecfg)
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range s.defs {
		names = append(names, name)
	}
	nj, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	w := &Worker[TTx]{s: s, ew: ew, cfg: cfg, names: string(nj)}
	for _, df := range s.defs {
		if err := ew.Register(kindOf(df.Name, Do), w.performer(df, Do)); err != nil {
			return nil, err
		}
		if err := ew.Register(kindOf(df.Name, Undo), w.performer(df, Undo), effect.WithMaxAttempts(cfg.UndoMaxAttempts)); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Run performs steps and advances sagas until ctx ends; it returns nil then,
// after the calls in flight finished (see [effect.Worker.Run]), or a
// configuration error at start.
func (w *Worker[TTx]) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- w.ew.Run(ctx) }()
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			n, moved, err := w.advanceOnce(ctx)
			if err != nil && ctx.Err() == nil {
				w.s.log.WarnContext(ctx, "advance failed", "error", err)
			}
			// Again at once only while full batches move: a batch whose
			// sagas all fail to advance waits for the next tick.
			if n < w.cfg.Batch || moved == 0 {
				break
			}
		}
		select {
		case err := <-errc:
			return err
		case <-t.C:
		}
	}
}

// AdvanceOnce moves on every saga of w's definitions (up to the batch
// size) whose awaited effect settled or that was asked to abort, and
// returns how many it looked at. A saga that cannot advance (its OnDone
// fails, its stored steps no longer fit its definition) is listed after
// the others next time, so it does not hold them back. [Worker.Run] calls
// it every PollInterval.
func (w *Worker[TTx]) AdvanceOnce(ctx context.Context) (int, error) {
	n, _, err := w.advanceOnce(ctx)
	return n, err
}

// advanceOnce is AdvanceOnce, also returning how many sagas it moved.
func (w *Worker[TTx]) advanceOnce(ctx context.Context) (looked, moved int, err error) {
	rows, err := w.s.d.Pool().Query(ctx, w.s.q.Due, w.cfg.Batch, w.names)
	if err != nil {
		return 0, 0, fmt.Errorf("saga: due: %w", err)
	}
	type due struct {
		sg           Saga
		eState, eErr string
		eResult      []byte
	}
	var list []due
	for rows.Next() {
		var d due
		sg, err := scanSaga(rows, &d.eState, &d.eResult, &d.eErr)
		if err != nil {
			rows.Close()
			return 0, 0, err
		}
		d.sg = sg
		list = append(list, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, d := range list {
		df, ok := w.s.defs[d.sg.Name]
		if !ok {
			continue // not listed by Due
		}
		if err := w.advance(ctx, df, d.sg, effect.State(d.eState), d.eResult, d.eErr); err != nil {
			errs = append(errs, err)
			if ctx.Err() == nil {
				// To the back of the queue: the others are not held behind it.
				if _, terr := w.s.d.Pool().Exec(ctx, w.s.q.Touch, d.sg.ID, d.sg.version, store.Micros(w.s.cfg.Now())); terr != nil {
					errs = append(errs, fmt.Errorf("saga %q: %w", d.sg.ID, terr))
				}
			}
			continue
		}
		moved++
	}
	return len(list), moved, errors.Join(errs...)
}

// advance moves sg one transition on, in one transaction: compare-and-set
// the saga row on its version, copy the settled result into the barrier,
// schedule the next effect.
func (w *Worker[TTx]) advance(ctx context.Context, df *def[TTx], sg Saga, eState effect.State, eResult []byte, eErr string) error {
	i := sg.Step
	if i < 0 || i >= len(df.Steps) || sg.Steps != len(df.Steps) {
		return fmt.Errorf("saga %q: stored step %d/%d does not fit definition %q (%d steps)", sg.ID, i, sg.Steps, df.Name, len(df.Steps))
	}
	curOp := Do
	if sg.State != Running {
		curOp = Undo
	}
	state, step, op, lastErr := sg.State, i, Op(""), sg.LastError
	switch {
	case sg.State == Running && sg.AbortRequested:
		state, op = Compensating, Undo
	case sg.State == Running && eState == effect.Completed:
		if i+1 < len(df.Steps) {
			step, op = i+1, Do
		} else {
			state = Completed
		}
	case sg.State == Running && eState == effect.Failed:
		state, op = Compensating, Undo
		lastErr = errtext.Clean(fmt.Sprintf("step %s failed: %s", df.Steps[i].Name, eErr))
	case (sg.State == Compensating || sg.State == Held) && eState == effect.Completed:
		if i > 0 {
			state, step, op = Compensating, i-1, Undo
		} else {
			state = Compensated
		}
	case sg.State == Compensating && eState == effect.Failed:
		state = Held
		lastErr = errtext.Clean(fmt.Sprintf("compensation of step %s failed: %s", df.Steps[i].Name, eErr))
	default:
		return nil
	}
	key := sg.CurrentKey
	if op != "" {
		key = Key(sg.ID, df.Steps[step].Name, op)
	}
	now := store.Micros(w.s.cfg.Now())
	return store.InTx(ctx, w.s.d, func(tx TTx) error {
		q := w.s.d.Tx(tx)
		n, err := q.Exec(ctx, w.s.q.Advance, sg.ID, sg.version, string(state), step, key, lastErr, now)
		if err != nil {
			return fmt.Errorf("saga: advance %q: %w", sg.ID, err)
		}
		if n == 0 {
			return nil // another advancer (or Abort) moved first
		}
		if eState == effect.Completed {
			if eResult == nil {
				eResult = []byte{}
			}
			if _, err := q.Exec(ctx, w.s.q.SetBarrier, sg.ID, i, string(curOp), OutcomeApplied, eResult, now, OutcomeStarted); err != nil {
				return fmt.Errorf("saga: record result of %q: %w", sg.CurrentKey, err)
			}
		}
		if op != "" {
			if _, err := w.s.schedule(ctx, tx, df, sg.ID, step, op); err != nil {
				return fmt.Errorf("saga %q: %w", sg.ID, err)
			}
		}
		if (state == Completed || state == Compensated) && df.OnDone != nil {
			done := sg
			done.State, done.Step, done.CurrentKey, done.LastError, done.AbortRequested = state, step, key, lastErr, false
			err := panics.Call(ctx, w.s.log, "OnDone panicked; the saga's last transition is rolled back and retried",
				func() error { return df.OnDone(ctx, tx, done) }, "saga_id", sg.ID)
			if err != nil {
				return fmt.Errorf("saga %q: OnDone: %w", sg.ID, err)
			}
		}
		return nil
	})
}

// performer returns the effect.Performer of op for definition df.
func (w *Worker[TTx]) performer(df *def[TTx], op Op) effect.Performer {
	return func(ctx context.Context, key string, raw []byte) ([]byte, error) {
		var p payload
		if err := json.Unmarshal(raw, &p); err != nil || p.Op != op || p.Step < 0 || p.Step >= len(df.Steps) ||
			Key(p.Saga, df.Steps[p.Step].Name, op) != key {
			return nil, idem.Permanent(fmt.Errorf("saga: effect %q: payload %q does not fit definition %q", key, raw, df.Name))
		}
		st := df.Steps[p.Step]
		token, found, err := effect.Token(ctx, w.s.d, key)
		if err != nil {
			return nil, fmt.Errorf("saga: effect %q: read fencing token: %w", key, err)
		}
		if !found {
			return nil, fmt.Errorf("saga: effect %q: read fencing token: not in progress", key)
		}
		sg, err := w.s.Get(ctx, p.Saga)
		if err != nil {
			if errors.Is(err, idem.ErrNotFound) {
				return nil, idem.Permanent(err)
			}
			return nil, err
		}
		c := Call{SagaID: sg.ID, Saga: df.Name, Step: st.Name, Index: p.Step, Op: op, Key: key,
			DoKey: Key(sg.ID, st.Name, Do), Input: sg.Input}
		if c.Results, err = w.results(ctx, sg.ID); err != nil {
			return nil, err
		}
		if op == Do {
			return w.do(ctx, st, token, c)
		}
		return w.undo(ctx, st, token, c)
	}
}

func (w *Worker[TTx]) results(ctx context.Context, id string) (map[string][]byte, error) {
	rows, err := w.s.d.Pool().Query(ctx, w.s.q.Results, id)
	if err != nil {
		return nil, fmt.Errorf("saga: results of %q: %w", id, err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var name string
		var res []byte
		if err := rows.Scan(&name, &res); err != nil {
			return nil, err
		}
		out[name] = res
	}
	return out, rows.Err()
}

func (w *Worker[TTx]) barrier(ctx context.Context, q store.Querier, c Call, op Op) (origin Op, outcome string, result []byte, found bool, err error) {
	var o string
	err = q.QueryRow(ctx, w.s.q.GetBarrier, c.SagaID, c.Index, string(op)).Scan(&o, &outcome, &result)
	if errors.Is(err, store.ErrNoRows) {
		return "", "", nil, false, nil
	}
	if err != nil {
		return "", "", nil, false, fmt.Errorf("saga: barrier %s/%s/%s: %w", c.SagaID, c.Step, op, err)
	}
	return Op(o), outcome, result, true, nil
}

func (w *Worker[TTx]) insertBarrier(ctx context.Context, q store.Querier, c Call, op, origin Op, outcome string) (bool, error) {
	n, err := q.Exec(ctx, w.s.q.InsertBarrier, c.SagaID, c.Index, string(op), c.Step, string(origin), outcome, store.Micros(w.s.cfg.Now()))
	if err != nil {
		return false, fmt.Errorf("saga: barrier %s/%s/%s: %w", c.SagaID, c.Step, op, err)
	}
	return n == 1, nil
}

func (w *Worker[TTx]) setBarrier(ctx context.Context, q store.Querier, c Call, op Op, outcome string, result []byte, from string) (bool, error) {
	if result == nil {
		result = []byte{}
	}
	n, err := q.Exec(ctx, w.s.q.SetBarrier, c.SagaID, c.Index, string(op), outcome, result, store.Micros(w.s.cfg.Now()), from)
	if err != nil {
		return false, fmt.Errorf("saga: barrier %s/%s/%s: %w", c.SagaID, c.Step, op, err)
	}
	return n == 1, nil
}

// fenced runs fn in a transaction that first proves the step's effect is
// still claimed under token.
func (w *Worker[TTx]) fenced(ctx context.Context, c Call, token int64, fn func(tx TTx, q store.Querier) error) error {
	return store.InTx(ctx, w.s.d, func(tx TTx) error {
		// The fence locks the effect row until commit, so a zombie's local
		// change rolls back (see effect.FenceTx).
		if err := effect.FenceTx(ctx, w.s.d, tx, c.Key, token); err != nil {
			return fmt.Errorf("saga: %w", err)
		}
		return fn(tx, w.s.d.Tx(tx))
	})
}

// errFinished reports a step of a saga that finished (completed or
// compensated) or whose finished record the garbage collector deleted.
var errFinished = fmt.Errorf("saga finished: %w", ErrNotRunning)

// live checks, inside the step's fenced transaction and before its barrier
// row is inserted, that the saga still exists and has not finished, and
// returns an error wrapping errFinished otherwise. A finished saga never
// changes state again, and package retention deletes the barrier rows
// (steps first, then the saga) only of sagas finished long ago: an effect
// redriven after that sees the saga finished, or gone, here and is refused,
// instead of finding no barrier row and running.
func (w *Worker[TTx]) live(ctx context.Context, q store.Querier, id string) error {
	var state string
	var abortq int64
	err := q.QueryRow(ctx, w.s.q.Aborting, id).Scan(&state, &abortq)
	if errors.Is(err, store.ErrNoRows) {
		return fmt.Errorf("saga %q: %w (%w)", id, errFinished, idem.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("saga: read %q: %w", id, err)
	}
	if st := State(state); st == Completed || st == Compensated {
		return fmt.Errorf("saga %q is %s: %w", id, st, errFinished)
	}
	return nil
}

// enter inserts the barrier row of op (origin op, outcome started); when it
// exists already it returns the stored row instead (inserted false).
func (w *Worker[TTx]) enter(ctx context.Context, q store.Querier, c Call, op Op) (inserted bool, origin Op, outcome string, stored []byte, err error) {
	if inserted, err = w.insertBarrier(ctx, q, c, op, op, OutcomeStarted); err != nil || inserted {
		return inserted, op, OutcomeStarted, nil, err
	}
	origin, outcome, stored, _, err = w.barrier(ctx, q, c, op)
	return false, origin, outcome, stored, err
}

// do runs an action behind the barrier.
func (w *Worker[TTx]) do(ctx context.Context, st Step[TTx], token int64, c Call) ([]byte, error) {
	var res []byte
	done := false
	err := w.fenced(ctx, c, token, func(tx TTx, q store.Querier) error {
		if st.DoTx != nil {
			// The fence locked the effect row, which Abort locks too: an
			// abort committed before it is seen here, and one after it waits
			// for this commit (see [Sagas.Abort]). An aborting saga's local
			// action is not applied; nothing is written to the barrier, so
			// its compensation is a null one.
			var state string
			var abortq int64
			if err := q.QueryRow(ctx, w.s.q.Aborting, c.SagaID).Scan(&state, &abortq); err != nil {
				return fmt.Errorf("saga: read %q: %w", c.SagaID, err)
			}
			if State(state) != Running || abortq != 0 {
				if origin, outcome, stored, found, err := w.barrier(ctx, q, c, Do); err != nil {
					return err
				} else if found && origin == Do && outcome == OutcomeApplied {
					res = stored // applied before the abort: compensated
				} else {
					res = refusedResult
				}
				done = true
				return nil
			}
		} else if err := w.live(ctx, q, c.SagaID); errors.Is(err, errFinished) {
			res, done = refusedResult, true
			return nil
		} else if err != nil {
			return err
		}
		inserted, origin, outcome, stored, err := w.enter(ctx, q, c, Do)
		if err != nil {
			return err
		}
		if !inserted {
			switch {
			case origin == Undo: // the compensation came first: refused
				res, done = refusedResult, true
				return nil
			case outcome == OutcomeApplied && st.DoTx != nil: // a local action already committed
				res, done = stored, true
				return nil
			}
		}
		if _, _, _, found, err := w.barrier(ctx, q, c, Undo); err != nil {
			return err
		} else if found { // compensated (or compensating) already: never applied
			res, done = refusedResult, true
			return nil
		}
		if st.DoTx == nil {
			return nil
		}
		r, err := st.DoTx(ctx, tx, c)
		if err != nil {
			return err
		}
		if _, err := w.setBarrier(ctx, q, c, Do, OutcomeApplied, r, OutcomeStarted); err != nil {
			return err
		}
		res, done = r, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if done {
		return res, nil
	}
	return st.Do(ctx, c)
}

// undo runs a compensation behind the barrier.
func (w *Worker[TTx]) undo(ctx context.Context, st Step[TTx], token int64, c Call) ([]byte, error) {
	var res []byte
	done := false
	err := w.fenced(ctx, c, token, func(tx TTx, q store.Querier) error {
		if err := w.live(ctx, q, c.SagaID); errors.Is(err, errFinished) {
			return idem.Permanent(err)
		} else if err != nil {
			return err
		}
		inserted, _, outcome, stored, err := w.enter(ctx, q, c, Undo)
		if err != nil {
			return err
		}
		if !inserted {
			if outcome == OutcomeNull || outcome == OutcomeApplied {
				res, done = stored, true
				return nil
			}
		} else {
			// The action's row decides: if the compensation inserts it, the
			// action never started (null compensation) and is refused later.
			took, err := w.insertBarrier(ctx, q, c, Do, Undo, OutcomeRefused)
			if err != nil {
				return err
			}
			if took {
				if _, err := w.setBarrier(ctx, q, c, Undo, OutcomeNull, nullResult, OutcomeStarted); err != nil {
					return err
				}
				res, done = nullResult, true
				return nil
			}
		}
		if st.Undo == nil && st.UndoTx == nil {
			if _, err := w.setBarrier(ctx, q, c, Undo, OutcomeApplied, nil, OutcomeStarted); err != nil {
				return err
			}
			res, done = []byte{}, true
		}
		return nil
	})
	if err != nil || done {
		return res, err
	}
	if st.Do != nil {
		// The action may still be running: never overtake it.
		if err := w.awaitAction(ctx, c.DoKey); err != nil {
			return nil, err
		}
		if _, ok := c.Results[c.Step]; !ok {
			if e, err := w.s.l.Get(ctx, c.DoKey); err == nil && e.State == effect.Completed && string(e.Result) != string(refusedResult) {
				c.Results[c.Step] = e.Result
			}
		}
	}
	if st.UndoTx == nil {
		return st.Undo(ctx, c)
	}
	err = w.fenced(ctx, c, token, func(tx TTx, q store.Querier) error {
		mine, err := w.setBarrier(ctx, q, c, Undo, OutcomeApplied, nil, OutcomeStarted)
		if err != nil {
			return err
		}
		if !mine {
			_, _, res, _, err = w.barrier(ctx, q, c, Undo)
			return err
		}
		if res, err = st.UndoTx(ctx, tx, c); err != nil {
			return err
		}
		_, err = w.setBarrier(ctx, q, c, Undo, OutcomeApplied, res, OutcomeApplied)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// awaitAction waits while the action's effect is in flight under a live
// lease, until ctx ends (then ErrActionInFlight, a transient error).
func (w *Worker[TTx]) awaitAction(ctx context.Context, doKey string) error {
	for {
		e, err := w.s.l.Get(ctx, doKey)
		if errors.Is(err, idem.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.State != effect.InProgress || !e.LeaseUntil.After(w.s.cfg.Now()) {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("saga: compensation waits for %q (lease until %s): %w", doKey, e.LeaseUntil.Format(time.RFC3339Nano), ErrActionInFlight)
		case <-t.C:
		}
	}
}
