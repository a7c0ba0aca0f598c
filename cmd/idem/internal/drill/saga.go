package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/saga"
)

// The saga scenarios drive the box office's paid orders (POST /paid-orders:
// the "paid-order" saga reserves seats, charges the fake payment provider,
// confirms; compensations release the seats and refund). Each checks, in
// the database and at the provider: no order charged without seats
// reserved; every seat reservation of a failed order released (and none of
// a confirmed one); each charge at most once per order, each refund at most
// once per charge; charged − refunded = the confirmed orders' totals; every
// saga finished (none running, compensating or held) and no saga effect
// left pending.

// sagaScenarios are the saga scenarios of the default run, in run order.
func sagaScenarios() []scenario {
	var out []scenario
	for _, s := range scenarios() {
		if strings.HasPrefix(s.name, "saga-") {
			out = append(out, s)
		}
	}
	return out
}

// sagaCheck is the outcome of the saga invariants.
type sagaCheck struct {
	f                                    boxoffice.PaidFacts
	charges, refunds                     int
	charged, refunded                    int64
	chargeCalls, refundCalls, refundKeys int
	unreserved, unreleased, releasedOK   int // charges without a hold; failed orders holding seats; confirmed orders released
	doubleCharged, doubleRefunded        int
	active, pendingEffects               int64
	nullCompensations, refusedLateCalls  int64
}

func (c sagaCheck) ok(n int) bool {
	return c.f.Orders == int64(n) && c.f.Pending == 0 && c.unreserved == 0 && c.unreleased == 0 && c.releasedOK == 0 &&
		c.doubleCharged == 0 && c.doubleRefunded == 0 && c.charged-c.refunded == c.f.ConfirmedCents && c.active == 0 && c.pendingEffects == 0
}

func (c sagaCheck) String() string {
	return fmt.Sprintf("orders=%d confirmed=%d failed=%d pending=%d charges=%d refunds=%d charged-refunded=%d confirmed_cents=%d "+
		"charged_without_seats=%d failed_holding_seats=%d confirmed_released=%d double_charged=%d double_refunded=%d sagas_unfinished=%d saga_effects_unsettled=%d",
		c.f.Orders, c.f.Confirmed, c.f.Failed, c.f.Pending, c.charges, c.refunds, c.charged-c.refunded, c.f.ConfirmedCents,
		c.unreserved, c.unreleased, c.releasedOK, c.doubleCharged, c.doubleRefunded, c.active, c.pendingEffects)
}

func sagaExpected(n int, extra string) string {
	return fmt.Sprintf("orders=%d pending=0 charged_without_seats=0 failed_holding_seats=0 confirmed_released=0 double_charged=0 double_refunded=0 "+
		"charged-refunded=confirmed_cents sagas_unfinished=0 saga_effects_unsettled=0%s", n, extra)
}

// checkSagas reads the invariants' facts from the database and provider.
func (e *env) checkSagas(ctx context.Context) (sagaCheck, error) {
	var c sagaCheck
	f, err := e.sys.PaidFacts(ctx)
	if err != nil {
		return c, err
	}
	c.f = f
	p := e.sys.Provider()
	c.charges, c.refunds, c.charged, c.refunded = p.PaymentTotals()
	perOrder := map[string]int{}
	for _, ch := range p.Charges() {
		perOrder[ch.Reference]++
		c.chargeCalls += ch.Calls
		if _, held := f.Holds[ch.Reference]; !held {
			c.unreserved++
		}
	}
	for _, n := range perOrder {
		if n > 1 {
			c.doubleCharged++
		}
	}
	perCharge := map[string]int{}
	for _, r := range p.Refunds() {
		c.refundKeys++
		c.refundCalls += r.Calls
		if r.Status == "refunded" {
			perCharge[r.ChargeKey]++
		}
	}
	for _, n := range perCharge {
		if n > 1 {
			c.doubleRefunded++
		}
	}
	for id, st := range f.Status {
		released, held := f.Holds[id]
		switch {
		case st == boxoffice.PaidFailed && held && !released:
			c.unreleased++
		case st == boxoffice.PaidConfirmed && (!held || released):
			c.releasedOK++
		}
	}
	c.active = f.Sagas[saga.Running] + f.Sagas[saga.Compensating] + f.Sagas[saga.Held]
	// idem's tables through their owners: the effect ledger and the
	// sagas' step records.
	isSaga := func(ef effect.Effect) bool { return strings.HasPrefix(ef.Kind, "saga:") }
	open, err := e.effects(ctx, isSaga, effect.Pending, effect.InProgress)
	if err != nil {
		return c, err
	}
	c.pendingEffects = int64(len(open))
	sagas, err := e.sys.Sagas().List(ctx, "", listAll)
	if err != nil {
		return c, fmt.Errorf("drill: sagas: %w", err)
	}
	for _, sg := range sagas {
		steps, err := e.sys.Sagas().Steps(ctx, sg.ID)
		if err != nil {
			return c, fmt.Errorf("drill: saga steps: %w", err)
		}
		for _, st := range steps {
			if st.Op == saga.Undo && st.Outcome == saga.OutcomeNull {
				c.nullCompensations++
			}
		}
	}
	return c, nil
}

// refusedLateCalls counts the saga actions the barrier refused (their
// effects completed with the result {"saga":"refused"}). Only the final check asks:
// it lists the completed effects, while the settle loop's checks need
// only the open ones.
func (e *env) refusedLateCalls(ctx context.Context) (int64, error) {
	refused, err := e.effects(ctx, func(ef effect.Effect) bool {
		return strings.HasPrefix(ef.Kind, "saga:") && strings.HasSuffix(ef.Kind, ":do") && string(ef.Result) == `{"saga":"refused"}`
	}, effect.Completed)
	return int64(len(refused)), err
}

// settleSagas waits until every saga finished and no saga effect is left,
// then returns the check.
func (e *env) settleSagas(ctx context.Context, n int) (sagaCheck, error) {
	deadline := time.Now().Add(e.r.cfg.Timeout)
	for {
		c, err := e.checkSagas(ctx)
		if err != nil {
			return c, err
		}
		settled := c.f.Orders >= int64(n) && c.f.Pending == 0 && c.active == 0 && c.pendingEffects == 0
		if settled || time.Now().After(deadline) {
			if c.refusedLateCalls, err = e.refusedLateCalls(ctx); err != nil {
				return c, err
			}
		}
		if settled {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("drill: sagas not settled after %v: %s", e.r.cfg.Timeout, c)
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// paidReply is one POST /paid-orders answer.
type paidReply struct {
	reply
	order boxoffice.PaidOrder
}

func (e *env) postPaid(ctx context.Context, key string, body []byte) (paidReply, error) {
	a, err := e.do(ctx, http.MethodPost, "/paid-orders", "", key, body, nil)
	if err != nil {
		return paidReply{}, err
	}
	p := paidReply{reply: a}
	if a.status == http.StatusCreated || a.status == http.StatusOK {
		if err := json.Unmarshal(a.body, &p.order); err != nil {
			return p, fmt.Errorf("drill: paid order answer %q: %w", a.body, err)
		}
	}
	return p, nil
}

func (e *env) cancelPaid(ctx context.Context, id string) (int, error) {
	a, err := e.do(ctx, http.MethodPost, "/paid-orders/"+id+"/cancel", "", "", nil, nil)
	return a.status, err
}

func paidBody(i int) []byte {
	return fmt.Appendf(nil, `{"event_id":"gala-%d","customer_email":"customer-%d@example.com","seats":%d,"total_cents":%d,"currency":"EUR"}`,
		i%3, i, 1+i%4, 1000*(1+i%4))
}

// createPaid creates n paid orders with keys prefix-i, r.cfg.Workers at a
// time, and returns them by index; after runs (in the same client) once
// order i is created.
func (r *runner) createPaid(ctx context.Context, e *env, n int, prefix string, after func(i int, o boxoffice.PaidOrder)) ([]boxoffice.PaidOrder, error) {
	out := make([]boxoffice.PaidOrder, n)
	var next atomic.Int64
	var errs failures
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				a, err := e.postPaid(ctx, fmt.Sprintf("%s-%d", prefix, i), paidBody(i))
				if err == nil && a.status != http.StatusCreated {
					err = fmt.Errorf("paid order %s-%d: status %d: %s", prefix, i, a.status, a.body)
				}
				if err != nil {
					errs.fail(err)
					continue
				}
				out[i] = a.order
				if after != nil {
					after(i, a.order)
				}
			}
		})
	}
	wg.Wait()
	return out, errs.err()
}

func sagaResult(res *Result, c sagaCheck, n int, extraExpected, extraObserved string, ok bool) {
	res.Expected = sagaExpected(n, extraExpected)
	res.Observed = c.String() + extraObserved
	res.Lost = int64(c.unreleased + c.unreserved)
	// Raw provider calls answered from the provider's idempotency record.
	res.DuplicatesSuppressed = int64(c.chargeCalls - c.charges + c.refundCalls - c.refundKeys)
	res.Pass = ok && c.ok(n)
}

// sagaCrashAfterStep: the saga worker makes the charge and then "dies"
// before the ledger records it: it hangs past its lease (so another claim
// takes the step over, as after a crash) and its late result is fenced
// off. The charge is re-sent with the same key and happens once.
func sagaCrashAfterStep(ctx context.Context, r *runner, res *Result) error {
	if r.cfg.Processes {
		return sagaCrashProcess(ctx, r, res)
	}
	m := r.small(res)
	// Each crash holds a worker slot for a lease: a few are enough.
	maxCrashes := int64(min(m/2, 10))
	g := newRNG(r.cfg.Seed, 14)
	var crashed atomic.Int64
	seen := sync.Map{}
	var lease time.Duration
	e, err := r.newEnv(ctx, "saga-crash-after-step", true, func(o *boxoffice.Options) {
		lease = o.Config.EffectLease
		o.Hooks.WrapSagaStep = func(step string, op saga.Op, f boxoffice.SagaStep) boxoffice.SagaStep {
			if op != saga.Do {
				return f
			}
			return func(ctx context.Context, c saga.Call) ([]byte, error) {
				out, err := f(ctx, c)
				if err == nil && crashed.Load() < maxCrashes && g.chance(max(r.cfg.Crash, 0.3)) {
					if _, again := seen.LoadOrStore(c.Key, true); !again {
						crashed.Add(1)
						time.Sleep(lease + lease/4) // dead to the ledger: the lease runs out, the step is claimed again
						return nil, errors.New("drill: saga worker crashed after the provider call, before recording it")
					}
				}
				return out, err
			}
		}
	})
	if err != nil {
		return err
	}
	defer e.close()
	_, cerr := r.createPaid(ctx, e, m, "crash", nil)
	c, serr := e.settleSagas(ctx, m)
	sagaResult(res, c, m, fmt.Sprintf(" confirmed=%d charges=%d charge_calls>=%d", m, m, m+int(crashed.Load())),
		fmt.Sprintf(" charge_calls=%d crashes=%d", c.chargeCalls, crashed.Load()),
		cerr == nil && c.f.Confirmed == int64(m) && c.charges == m && c.chargeCalls >= m+int(crashed.Load()))
	return errors.Join(cerr, serr)
}

// sagaCompensationRace: charges are slow; most orders are cancelled while
// their charge is in flight (claimed, past the barrier, at the provider),
// some at once (their compensation usually overtakes the reservation: a
// null compensation, and the late action is refused), the rest not at all.
func sagaCompensationRace(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	e, err := r.newEnv(ctx, "saga-compensation-race", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	e.sys.Provider().Inject(fakeprovider.Fault{On: fakeprovider.Charges, Times: -1, Delay: 250 * time.Millisecond})
	var inFlight, immediate, accepted, tooLate atomic.Int64
	var cancelErrs failures
	var wg sync.WaitGroup
	ledger := e.sys.Ledger()
	_, cerr := r.createPaid(ctx, e, m, "race", func(i int, o boxoffice.PaidOrder) {
		if i%4 == 3 {
			return // runs to completion
		}
		wg.Go(func() {
			if i%4 == 1 {
				immediate.Add(1)
			} else {
				deadline := time.Now().Add(e.r.cfg.Timeout)
				for time.Now().Before(deadline) && ctx.Err() == nil {
					ef, err := ledger.Get(ctx, saga.Key(o.SagaID, "charge", saga.Do))
					if err == nil && ef.State == effect.InProgress {
						inFlight.Add(1)
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			st, err := e.cancelPaid(ctx, o.OrderID)
			switch {
			case err != nil:
				cancelErrs.fail(err)
			case st == http.StatusAccepted:
				accepted.Add(1)
			case st == http.StatusConflict:
				tooLate.Add(1)
			default:
				cancelErrs.fail(fmt.Errorf("cancel %s: status %d", o.OrderID, st))
			}
		})
	})
	wg.Wait()
	c, serr := e.settleSagas(ctx, m)
	sagaResult(res, c, m, " cancels_in_flight>0 failed>=cancels_accepted",
		fmt.Sprintf(" cancels_in_flight=%d cancels_immediate=%d cancels_accepted=%d cancels_too_late=%d null_compensations=%d late_actions_refused=%d",
			inFlight.Load(), immediate.Load(), accepted.Load(), tooLate.Load(), c.nullCompensations, c.refusedLateCalls),
		cerr == nil && cancelErrs.err() == nil && inFlight.Load() > 0 && c.f.Failed >= accepted.Load())
	return errors.Join(cerr, serr, cancelErrs.err())
}

// sagaCompensationTimeout: charges are made and then time out (the client
// gives up, the charge happened), some are declined; a charge that keeps
// timing out exhausts its attempts and the saga compensates; the refunds
// are made and then time out too, and are retried with their keys.
func sagaCompensationTimeout(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	// Short provider calls: each time-out costs a call timeout.
	e, err := r.newEnv(ctx, "saga-compensation-timeout", true, func(o *boxoffice.Options) {
		o.Config.MaxAttempts, o.Config.EffectCallTimeout = 1, 400*time.Millisecond
	})
	if err != nil {
		return err
	}
	defer e.close()
	p := e.sys.Provider()
	// One attempt per charge: the first charges are declined, the next k
	// hang after charging (the client times out, the saga gives up on the
	// charge although it happened), the first k refunds hang after
	// refunding and are retried.
	k := min(m, 24)
	p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Times: max(k/4, 1), Status: http.StatusPaymentRequired})
	p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Times: k, After: fakeprovider.Hang, Hang: 3 * time.Second})
	p.Inject(fakeprovider.Fault{On: fakeprovider.Refunds, Times: k, After: fakeprovider.Hang, Hang: 3 * time.Second})
	_, cerr := r.createPaid(ctx, e, m, "timeout", nil)
	c, serr := e.settleSagas(ctx, m)
	retriedRefunds := 0
	for _, rf := range p.Refunds() {
		if rf.Status == "refunded" && rf.Calls > 1 {
			retriedRefunds++
		}
	}
	sagaResult(res, c, m, " refunds>0 refunds_retried_after_timeout>0",
		fmt.Sprintf(" refunds_retried_after_timeout=%d refund_calls=%d", retriedRefunds, c.refundCalls),
		cerr == nil && c.refunds > 0 && retriedRefunds > 0)
	return errors.Join(cerr, serr)
}

// sagaDuplicateStart: every paid order is requested by several racing
// clients with the same Idempotency-Key (one saga id): one answer 201, the
// others 200 with the same order; the key with another body is 422.
func sagaDuplicateStart(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	const racers = 4
	e, err := r.newEnv(ctx, "saga-duplicate-start", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	var created, replays, mismatches, other atomic.Int64
	var errs failures
	fail := errs.fail
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(r.cfg.Workers/2, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= m {
					return
				}
				key := fmt.Sprintf("dup-%d", i)
				ids := make([]string, racers)
				var rw sync.WaitGroup
				for k := range racers {
					rw.Go(func() {
						a, err := e.postPaid(ctx, key, paidBody(i))
						switch {
						case err != nil:
							fail(err)
						case a.status == http.StatusCreated:
							created.Add(1)
						case a.status == http.StatusOK:
							replays.Add(1)
						default:
							other.Add(1)
						}
						ids[k] = a.order.OrderID
					})
				}
				rw.Wait()
				for _, id := range ids {
					if id != ids[0] {
						fail(fmt.Errorf("key %s answered orders %q", key, ids))
						break
					}
				}
				a, err := e.postPaid(ctx, key, paidBody(i+1))
				if err != nil {
					fail(err)
				} else if a.status == http.StatusUnprocessableEntity {
					mismatches.Add(1)
				} else {
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	c, serr := e.settleSagas(ctx, m)
	sagaResult(res, c, m, fmt.Sprintf(" created=%d duplicates=%d mismatch_422=%d confirmed=%d charges=%d", m, (racers-1)*m, m, m, m),
		fmt.Sprintf(" created=%d duplicates=%d mismatch_422=%d other=%d", created.Load(), replays.Load(), mismatches.Load(), other.Load()),
		errs.err() == nil && created.Load() == int64(m) && replays.Load() == int64((racers-1)*m) && mismatches.Load() == int64(m) &&
			other.Load() == 0 && c.f.Confirmed == int64(m) && c.charges == m)
	res.DuplicatesSuppressed += replays.Load() // duplicate starts answered by the one saga
	return errors.Join(serr, errs.err())
}

// sagaCrashProcess is saga-crash-after-step with --processes: the saga
// worker runs in an "idem worker --role effects" child process, and each of
// the first charges is made by the provider and then held (no answer) while
// the drill SIGKILLs the child: killed after the provider call, before
// recording it, for real. The restarted child claims the step once the
// lease ran out and re-sends the same key.
func sagaCrashProcess(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	kills := min(m, max(r.cfg.Kills/4, 3))
	dir := filepath.Join(r.tmp, "saga-crash-process")
	pa, err := r.newParent(ctx, "saga-crash-after-step", dir)
	if err != nil {
		return err
	}
	defer pa.close()
	e, exe := pa.e, pa.exe
	logf, err := os.OpenFile(filepath.Join(dir, "effects-0.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--role", "effects", "-v", "--effect-lease", "2s", "--poll", "20ms"}, pa.args...)
	c := &child{name: "effects-0", args: args, env: pa.env, log: logf}
	if err := c.start(exe); err != nil {
		return err
	}
	defer c.stop()

	p := e.sys.Provider()
	// The killer: one charge at a time is performed and its answer held by
	// the provider (an injected Hang): the child has made the call and not
	// recorded it. SIGKILL it then and restart it; the next held call is
	// usually the restarted child re-sending an abandoned step's key.
	var killed, caught atomic.Int64
	stop := make(chan struct{})
	killErr := make(chan error, 1)
	heldCalls := func() (n int64) {
		for _, call := range p.PaymentCallLog() {
			if call.Fault && call.Status == http.StatusOK {
				n++
			}
		}
		return n
	}
	go func() {
		for killed.Load() < int64(kills) {
			p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, After: fakeprovider.Hang, Hang: time.Minute})
			for heldCalls() == caught.Load() {
				select {
				case <-stop:
					killErr <- nil
					return
				case <-ctx.Done():
					killErr <- ctx.Err()
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
			caught.Store(heldCalls())
			c.kill()
			killed.Add(1)
			if err := c.start(exe); err != nil {
				killErr <- err
				return
			}
		}
		killErr <- nil
	}()
	_, cerr := r.createPaid(ctx, e, m, "crashp", nil)
	ch, serr := e.settleSagas(ctx, m)
	close(stop)
	kerr := <-killErr
	sagaResult(res, ch, m, fmt.Sprintf(" confirmed=%d charges=%d sigkills_after_charge=%d", m, m, kills),
		fmt.Sprintf(" sigkills_after_charge=%d held_calls=%d charge_calls=%d", killed.Load(), caught.Load(), ch.chargeCalls),
		cerr == nil && kerr == nil && ch.f.Confirmed == int64(m) && ch.charges == m && killed.Load() == int64(kills) &&
			ch.chargeCalls >= m+int(caught.Load()))
	return errors.Join(cerr, serr, kerr)
}
