package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

// fixture is a small order system: orders, seat reservations and a payment
// provider, with an "order" saga reserve → charge → confirm.
type fixture struct {
	t        *testing.T
	d        store.Driver[any]
	l        *effect.Ledger[any]
	s        *saga.Sagas[any]
	p        *fakeprovider.Provider
	c        *fakeprovider.Client
	confirmE atomic.Pointer[error] // error the confirm step returns, if set
	// afterCharge runs after the provider answered a charge, before the
	// result is returned (a crash or hang between call and record).
	afterCharge atomic.Pointer[func()]
	// afterConfirm runs inside the confirm step's transaction, after its
	// update and before the commit (an Abort racing the last step).
	afterConfirm atomic.Pointer[func()]
	failed       atomic.Int64 // OnFailed calls
	failedKinds  sync.Map
}

type orderInput struct {
	Order  string `json:"order"`
	Seats  int64  `json:"seats"`
	Amount int64  `json:"amount"`
}

func newFixture(t *testing.T, d store.Driver[any], lease time.Duration) *fixture {
	t.Helper()
	ctx := context.Background()
	for _, s := range []string{
		`CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL, total bigint NOT NULL, charge_id text NOT NULL DEFAULT '')`,
		`CREATE TABLE reservations (order_id text PRIMARY KEY, seats bigint NOT NULL, released integer NOT NULL DEFAULT 0)`,
	} {
		if _, err := d.Pool().Exec(ctx, testdb.Portable(d.Dialect(), s)); err != nil {
			t.Fatal(err)
		}
	}
	p := fakeprovider.New(fakeprovider.Config{})
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() { p.Close(); srv.Close() })
	f := &fixture{t: t, d: d, p: p, c: &fakeprovider.Client{BaseURL: srv.URL, Timeout: 400 * time.Millisecond}}
	l, err := effect.New(d, effect.Config{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	f.s = f.sagas(l)
	return f
}

func (f *fixture) sagas(l *effect.Ledger[any]) *saga.Sagas[any] {
	s, err := saga.New(f.d, l, saga.Config{}, f.definition())
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func input(c saga.Call) (orderInput, error) {
	var in orderInput
	err := json.Unmarshal(c.Input, &in)
	return in, err
}

func (f *fixture) definition() saga.Definition[any] {
	return saga.Definition[any]{Name: "order", OnDone: func(ctx context.Context, tx any, sg saga.Saga) error {
		if sg.State != saga.Compensated {
			return nil
		}
		_, err := f.d.Tx(tx).Exec(ctx, `UPDATE orders SET status = 'failed' WHERE id = $1 AND status = 'pending'`, sg.ID)
		return err
	}, Steps: []saga.Step[any]{
		{
			Name: "reserve",
			DoTx: func(ctx context.Context, tx any, c saga.Call) ([]byte, error) {
				in, err := input(c)
				if err != nil {
					return nil, idem.Permanent(err)
				}
				_, err = f.d.Tx(tx).Exec(ctx, `INSERT INTO reservations (order_id, seats) VALUES ($1, $2)`, in.Order, in.Seats)
				return []byte(fmt.Sprintf(`{"seats":%d}`, in.Seats)), err
			},
			UndoTx: func(ctx context.Context, tx any, c saga.Call) ([]byte, error) {
				in, _ := input(c)
				_, err := f.d.Tx(tx).Exec(ctx, `UPDATE reservations SET released = released + 1 WHERE order_id = $1`, in.Order)
				return nil, err
			},
		},
		{
			Name: "charge",
			Do: func(ctx context.Context, c saga.Call) ([]byte, error) {
				if _, ok := c.Results["reserve"]; !ok {
					return nil, idem.Permanent(errors.New("charge without a reservation"))
				}
				in, _ := input(c)
				r, err := f.c.Charge(ctx, c.Key, fakeprovider.ChargeRequest{Amount: in.Amount, Currency: "EUR", Reference: in.Order})
				if err != nil {
					return nil, err
				}
				if h := f.afterCharge.Load(); h != nil {
					(*h)()
				}
				return json.Marshal(r)
			},
			Undo: func(ctx context.Context, c saga.Call) ([]byte, error) {
				r, err := f.c.Refund(ctx, c.Key, c.DoKey)
				if err != nil {
					return nil, err
				}
				return json.Marshal(r)
			},
		},
		{
			Name: "confirm",
			DoTx: func(ctx context.Context, tx any, c saga.Call) ([]byte, error) {
				if e := f.confirmE.Load(); e != nil {
					return nil, *e
				}
				in, _ := input(c)
				var ch fakeprovider.ChargeResult
				if err := json.Unmarshal(c.Results["charge"], &ch); err != nil || ch.ID == "" {
					return nil, idem.Permanent(fmt.Errorf("no charge result to confirm: %q", c.Results["charge"]))
				}
				_, err := f.d.Tx(tx).Exec(ctx, `UPDATE orders SET status = 'confirmed', charge_id = $2 WHERE id = $1`, in.Order, ch.ID)
				if h := f.afterConfirm.Load(); h != nil {
					(*h)()
				}
				return nil, err
			},
		},
	}}
}

// start creates an order and starts its saga in one transaction.
func (f *fixture) start(ctx context.Context, s *saga.Sagas[any], id string, amount int64) (saga.Saga, bool, error) {
	var (
		sg      saga.Saga
		created bool
	)
	in, _ := json.Marshal(orderInput{Order: id, Seats: 2, Amount: amount})
	err := store.InTx(ctx, f.d, func(tx any) error {
		var err error
		if sg, created, err = s.StartTx(ctx, tx, "order", id, in); err != nil || !created {
			return err
		}
		_, err = f.d.Tx(tx).Exec(ctx, `INSERT INTO orders (id, status, total) VALUES ($1, 'pending', $2)`, id, amount)
		return err
	})
	return sg, created, err
}

func (f *fixture) worker(s *saga.Sagas[any], maxAttempts int) *saga.Worker[any] {
	w, err := saga.NewWorker(s, saga.WorkerConfig[any]{
		Effect: effect.WorkerConfig[any]{
			PollInterval: 10 * time.Millisecond,
			MaxAttempts:  maxAttempts,
			Backoff:      func(int) time.Duration { return 20 * time.Millisecond },
			OnFailed: func(ctx context.Context, tx any, e effect.Effect, cause error) error {
				f.failed.Add(1)
				f.failedKinds.Store(e.Kind, true)
				return nil
			},
		},
		UndoMaxAttempts: 4,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

// run runs w until the test ends.
func (f *fixture) run(w *saga.Worker[any]) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			f.t.Error(err)
		}
	}()
	stop := func() { cancel(); <-done }
	f.t.Cleanup(stop)
	return cancel
}

func (f *fixture) wait(id string, want ...saga.State) saga.Saga {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sg, err := f.s.Get(context.Background(), id)
		if err == nil {
			for _, w := range want {
				if sg.State == w {
					return sg
				}
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("saga %s: %+v (%v), want %v", id, sg, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitRefused waits for the effect key to complete and fails unless its
// result is {"saga":"refused"} (an action the saga's barrier refused).
func (f *fixture) waitRefused(key string) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		e, err := f.l.Get(context.Background(), key)
		if err == nil && e.State == effect.Completed {
			if string(e.Result) != `{"saga":"refused"}` {
				f.t.Fatalf("%s: result %s, want refused", key, e.Result)
			}
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s not settled: %+v %v", key, e, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// invariants checks, in the database and at the provider: no order charged
// without seats reserved; every reservation of a failed order released
// exactly once; each charge and each refund at most once; charged −
// refunded = the confirmed orders' totals.
func (f *fixture) invariants() {
	f.t.Helper()
	ctx := context.Background()
	var confirmed int64
	if err := f.d.Pool().QueryRow(ctx, `SELECT COALESCE(SUM(total), 0) FROM orders WHERE status = 'confirmed'`).Scan(&confirmed); err != nil {
		f.t.Fatal(err)
	}
	for key, ch := range f.p.Charges() {
		if ch.Calls < 1 {
			f.t.Errorf("charge %s without calls", key)
		}
		n := testdb.Count(f.t, f.d, `SELECT count(*) FROM reservations WHERE order_id = $1`, ch.Reference)
		if n != 1 {
			f.t.Errorf("order %s charged (%s) without seats reserved", ch.Reference, key)
		}
	}
	if n := testdb.Count(f.t, f.d, `SELECT count(*) FROM reservations r JOIN orders o ON o.id = r.order_id
		WHERE (o.status = 'confirmed' AND r.released <> 0) OR (o.status <> 'confirmed' AND r.released <> 1)`); n != 0 {
		f.t.Errorf("%d reservations not released exactly once for failed orders (or released for confirmed ones)", n)
	}
	_, _, charged, refunded := f.p.PaymentTotals()
	if charged-refunded != confirmed {
		f.t.Errorf("charged %d − refunded %d = %d, confirmed totals %d", charged, refunded, charged-refunded, confirmed)
	}
}

func TestSagaRunsStepsInOrderAndHandsResultsOn(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		sg, created, err := f.start(ctx, f.s, "o-1", 900)
		if err != nil || !created || sg.State != saga.Running || sg.CurrentKey != "saga/o-1/reserve/do" {
			t.Fatalf("start: %+v %v %v", sg, created, err)
		}
		f.run(f.worker(f.s, 3))
		f.wait("o-1", saga.Completed)
		var status, chargeID string
		if err := d.Pool().QueryRow(ctx, `SELECT status, charge_id FROM orders WHERE id = 'o-1'`).Scan(&status, &chargeID); err != nil {
			t.Fatal(err)
		}
		ch, ok := f.p.Charges()["saga/o-1/charge/do"]
		if status != "confirmed" || !ok || chargeID != ch.ID || ch.Amount != 900 {
			t.Fatalf("order %s charge %q, provider charge %+v %v", status, chargeID, ch, ok)
		}
		all, err := f.s.List(ctx, "", 10)
		done, err2 := f.s.List(ctx, saga.Completed, 10)
		running, err3 := f.s.List(ctx, saga.Running, 10)
		counts, err4 := f.s.Counts(ctx)
		if err := errors.Join(err, err2, err3, err4); err != nil || len(all) != 1 || len(done) != 1 || len(running) != 0 ||
			counts[saga.Completed] != 1 || all[0].ID != "o-1" {
			t.Fatalf("list %+v %+v %+v counts %v: %v", all, done, running, counts, err)
		}
		recs, err := f.s.Steps(ctx, "o-1")
		if err != nil || len(recs) != 3 {
			t.Fatalf("steps %+v %v", recs, err)
		}
		for _, r := range recs {
			if r.Op != saga.Do || r.Outcome != saga.OutcomeApplied {
				t.Fatalf("step record %+v", r)
			}
		}
		f.invariants()
	})
}

func TestSagaStartInsideARolledBackTransactionLeavesNothing(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		boom := errors.New("business change failed")
		err := store.InTx(ctx, d, func(tx any) error {
			if _, _, err := f.s.StartTx(ctx, tx, "order", "o-rb", []byte(`{}`)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, err := f.s.Get(ctx, "o-rb"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("saga after rollback: %v", err)
		}
		if _, err := f.l.Get(ctx, "saga/o-rb/reserve/do"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("effect after rollback: %v", err)
		}
	})
}

func TestSagaRacingDuplicateStartsAreOneSaga(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		var created atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, c, err := f.start(ctx, f.s, "o-dup", 500)
				if err != nil {
					t.Error(err)
				}
				if c {
					created.Add(1)
				}
			})
		}
		wg.Wait()
		if created.Load() != 1 {
			t.Fatalf("%d starts created the saga, want 1", created.Load())
		}
		_, _, err := f.start(ctx, f.s, "o-dup", 501)
		var fm *idem.FingerprintMismatchError
		if !errors.Is(err, saga.ErrMismatch) || !errors.Is(err, idem.ErrFingerprintMismatch) || !errors.As(err, &fm) {
			t.Fatalf("other input under the id: %v, want ErrMismatch", err)
		}
		if _, _, err := f.s.Start(ctx, "nope", "x", nil); !errors.Is(err, saga.ErrUnknownDefinition) {
			t.Fatalf("unknown definition: %v", err)
		}
		f.run(f.worker(f.s, 3))
		f.wait("o-dup", saga.Completed)
		if n, _, _, _ := f.p.PaymentTotals(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM orders`); n != 1 {
			t.Fatalf("%d orders", n)
		}
		f.invariants()
	})
}

func TestSagaDeclinedChargeReleasesSeatsInReverse(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		f.p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Status: http.StatusPaymentRequired})
		if _, _, err := f.start(ctx, f.s, "o-dec", 700); err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.s, 3))
		sg := f.wait("o-dec", saga.Compensated)
		if sg.LastError == "" {
			t.Fatal("no last error recorded for the declined step")
		}
		recs, _ := f.s.Steps(ctx, "o-dec")
		reserveUndo, chargeUndo := recs[1], recs[3]
		if len(recs) != 4 || reserveUndo.Op != saga.Undo || chargeUndo.Op != saga.Undo || chargeUndo.CreatedAt.After(reserveUndo.CreatedAt) {
			t.Fatalf("compensations not in reverse order: %+v", recs)
		}
		if n, refunds, _, _ := f.p.PaymentTotals(); n != 0 || refunds != 0 {
			t.Fatalf("charges=%d refunds=%d after a decline", n, refunds)
		}
		if f.failed.Load() != 0 {
			t.Fatalf("a failed action was dead-lettered (%d)", f.failed.Load())
		}
		f.invariants()
	})
}

func TestSagaTimedOutChargeThatWentThroughIsRefundedOnce(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		// Every charge is made and then hangs past the client's time-out:
		// the action exhausts its attempts although the charge happened.
		f.p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Times: -1, After: fakeprovider.Hang, Hang: 2 * time.Second})
		if _, _, err := f.start(ctx, f.s, "o-to", 1200); err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.s, 2))
		f.wait("o-to", saga.Compensated)
		n, refunds, charged, refunded := f.p.PaymentTotals()
		if n != 1 || refunds != 1 || charged != 1200 || refunded != 1200 {
			t.Fatalf("charges=%d refunds=%d charged=%d refunded=%d, want one charge refunded once", n, refunds, charged, refunded)
		}
		if c := f.p.Charges()["saga/o-to/charge/do"]; c.Calls < 2 {
			t.Fatalf("charge retried %d times, want ≥ 2 calls with one key", c.Calls)
		}
		f.invariants()
	})
}

func TestSagaProviderTimeoutDuringRefund(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		perm := idem.Permanent(errors.New("event cancelled"))
		f.confirmE.Store(&perm)
		// The first two refunds are made and then time out.
		f.p.Inject(fakeprovider.Fault{On: fakeprovider.Refunds, Times: 2, After: fakeprovider.Hang, Hang: 2 * time.Second})
		if _, _, err := f.start(ctx, f.s, "o-rt", 300); err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.s, 3))
		f.wait("o-rt", saga.Compensated)
		n, refunds, charged, refunded := f.p.PaymentTotals()
		if n != 1 || refunds != 1 || charged != refunded {
			t.Fatalf("charges=%d refunds=%d charged=%d refunded=%d", n, refunds, charged, refunded)
		}
		if r := f.p.Refunds()["saga/o-rt/charge/undo"]; r.Calls < 3 {
			t.Fatalf("refund calls %d, want ≥ 3 (two time-outs, then a replay)", r.Calls)
		}
		f.invariants()
	})
}

func TestSagaNullCompensationRefusesTheLateAction(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		if _, _, err := f.start(ctx, f.s, "o-null", 400); err != nil {
			t.Fatal(err)
		}
		// The reserve action is delayed (not due): the saga is aborted, its
		// compensation comes first.
		testdb.Exec(t, d, `UPDATE `+d.Table("effects")+` SET next_attempt_at = $1 WHERE effect_key = 'saga/o-null/reserve/do'`,
			store.Micros(time.Now().Add(time.Hour)))
		if err := f.s.Abort(ctx, "o-null", "customer cancelled"); err != nil {
			t.Fatal(err)
		}
		stop := f.run(f.worker(f.s, 3))
		f.wait("o-null", saga.Compensated)
		stop()
		recs, _ := f.s.Steps(ctx, "o-null")
		if len(recs) != 2 || recs[0].Origin != saga.Undo || recs[0].Outcome != saga.OutcomeRefused || recs[1].Outcome != saga.OutcomeNull {
			t.Fatalf("barrier rows %+v, want the action's row taken by a null compensation", recs)
		}
		// The late action arrives now: refused, nothing reserved.
		testdb.Exec(t, d, `UPDATE `+d.Table("effects")+` SET next_attempt_at = 0 WHERE effect_key = 'saga/o-null/reserve/do'`)
		f.run(f.worker(f.s, 3))
		f.waitRefused("saga/o-null/reserve/do")
		if n := testdb.Count(t, d, `SELECT count(*) FROM reservations`); n != 0 {
			t.Fatalf("the late action reserved seats after its compensation")
		}
		var status string
		if err := d.Pool().QueryRow(ctx, `SELECT status FROM orders WHERE id = 'o-null'`).Scan(&status); err != nil || status != "failed" {
			t.Fatalf("order status %q %v after a compensated saga, want failed (OnDone)", status, err)
		}
		if err := f.s.Abort(ctx, "o-null", "again"); !errors.Is(err, saga.ErrNotRunning) {
			t.Fatalf("abort of a compensated saga: %v", err)
		}
	})
}

func TestSagaCompensationRacingAnInFlightAction(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		f.c.Timeout = 3 * time.Second
		ctx := context.Background()
		// Each charge stays in flight for 1.5 s (below the client's time-out):
		// the pollers below must see it there, and with -race on a loaded
		// machine one poll (two queries) has been seen to take longer than
		// a shorter window.
		f.p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Times: -1, Delay: 1500 * time.Millisecond})
		const n = 4
		for i := range n {
			if _, _, err := f.start(ctx, f.s, fmt.Sprintf("o-race-%d", i), int64(100+i)); err != nil {
				t.Fatal(err)
			}
		}
		f.run(f.worker(f.s, 3))
		// Abort every saga but the last while its charge is in flight (claimed,
		// past the barrier, at the slow provider); the last one at once.
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				id := fmt.Sprintf("o-race-%d", i)
				deadline := time.Now().Add(10 * time.Second)
				for i < n-1 {
					e, err := f.l.Get(ctx, "saga/"+id+"/charge/do")
					var rows int64
					qerr := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("saga_steps")+` WHERE saga_id = $1 AND step = 1 AND op = 'do'`, id).Scan(&rows)
					if err == nil && qerr == nil && e.State == effect.InProgress && rows == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("%s: charge never in flight (last seen: effect %+v, %v; barrier rows %d, %v)", id, e, err, rows, qerr)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				if err := f.s.Abort(ctx, id, "race"); err != nil && !errors.Is(err, saga.ErrNotRunning) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i := range n {
			f.wait(fmt.Sprintf("o-race-%d", i), saga.Compensated, saga.Completed)
		}
		// The compensations waited for the charges in flight, then refunded
		// them; nothing is left in flight.
		if c, r, _, _ := f.p.PaymentTotals(); c < n-1 || r < n-1 {
			t.Errorf("charges=%d refunds=%d, want ≥ %d each (in-flight charges refunded)", c, r, n-1)
		}
		for key, ch := range f.p.Charges() {
			r, ok := f.p.Refunds()[key[:len(key)-len("do")]+"undo"]
			var o string
			_ = d.Pool().QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, ch.Reference).Scan(&o)
			if o != "confirmed" && (!ok || r.Status != "refunded") {
				t.Errorf("charge %s of aborted order %s not refunded: %+v", key, ch.Reference, r)
			}
		}
		f.invariants()
	})
}

func TestSagaZombieWorkerAfterProviderCallIsFenced(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 1*time.Second)
		f.c.Timeout = 400 * time.Millisecond
		ctx := context.Background()
		release := make(chan struct{})
		stuck := make(chan struct{})
		var once atomic.Bool
		hook := func() {
			if once.CompareAndSwap(false, true) {
				close(stuck)
				<-release // the worker hangs after the provider call: a zombie
			}
		}
		f.afterCharge.Store(&hook)
		if _, _, err := f.start(ctx, f.s, "o-z", 800); err != nil {
			t.Fatal(err)
		}
		// Worker A makes the charge and hangs before recording it.
		zctx, abandon := context.WithCancel(context.Background())
		aDone := make(chan struct{})
		go func() { defer close(aDone); _ = f.worker(f.s, 5).Run(zctx) }()
		select {
		case <-stuck:
		case <-time.After(20 * time.Second):
			t.Fatal("the charge never reached the provider")
		}
		// Worker B (another process: its own ledger and sagas) takes the
		// step over once the lease ran out and re-sends the same key.
		l2, err := effect.New(d, effect.Config{Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.sagas(l2), 5))
		f.wait("o-z", saga.Completed)
		e, _ := f.l.Get(ctx, "saga/o-z/charge/do")
		close(release)
		abandon()
		<-aDone
		after, _ := f.l.Get(ctx, "saga/o-z/charge/do")
		if e.Token < 2 || after.Token != e.Token || after.State != effect.Completed {
			t.Fatalf("charge effect %+v then %+v: want the take-over's token to stand", e, after)
		}
		ch := f.p.Charges()["saga/o-z/charge/do"]
		if n, _, _, _ := f.p.PaymentTotals(); n != 1 || ch.Calls < 2 {
			t.Fatalf("charges=%d calls=%d, want one charge for ≥ 2 calls", n, ch.Calls)
		}
		f.invariants()
	})
}

func TestSagaFailedCompensationHoldsAndResumesAfterRedrive(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		perm := idem.Permanent(errors.New("event cancelled"))
		f.confirmE.Store(&perm)
		f.p.Inject(fakeprovider.Fault{On: fakeprovider.Refunds, Times: -1, Status: http.StatusServiceUnavailable})
		if _, _, err := f.start(ctx, f.s, "o-held", 650); err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.s, 3))
		sg := f.wait("o-held", saga.Held)
		if sg.CurrentKey != "saga/o-held/charge/undo" || f.failed.Load() != 1 {
			t.Fatalf("held saga %+v, %d dead letters", sg, f.failed.Load())
		}
		if _, ok := f.failedKinds.Load("saga:order:undo"); !ok {
			t.Fatal("the compensation was not dead-lettered")
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM reservations WHERE released = 0`); n != 1 {
			t.Fatal("seats released before the refund was reconciled")
		}
		f.p.Reset()
		if err := f.l.Retry(ctx, sg.CurrentKey); err != nil {
			t.Fatal(err)
		}
		f.wait("o-held", saga.Compensated)
		f.invariants()
	})
}

// TestExamplePgx runs Example_pgx against the test server and checks what it
// prints ("go test" runs only examples that need no server by itself).
func TestExamplePgx(t *testing.T) {
	testdb.PostgresURL(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout = stdout }()
		Example_pgx()
	}()
	w.Close()
	out, _ := io.ReadAll(r)
	if want := "started: true\ncharge do applied\n"; string(out) != want {
		t.Fatalf("Example_pgx printed %q, want %q", out, want)
	}
}

// An Abort that arrives while the last step (confirm, a local action with no
// compensation) commits must be decided by the database, not by timing:
// here confirm's transaction is open when Abort is called, so confirm wins
// and Abort is refused (ErrLastStepApplied or ErrNotRunning); the saga
// completes and nothing is refunded or released. Before the fix, PostgreSQL
// accepted the abort, refunded and released a confirmed order.
func TestSagaAbortRacingTheLastStepCommitIsRefused(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		abortErr := make(chan error, 1)
		h := func() {
			go func() { abortErr <- f.s.Abort(ctx, "o-late", "cancel while confirm commits") }()
			time.Sleep(200 * time.Millisecond) // Abort runs while this transaction is open
		}
		f.afterConfirm.Store(&h)
		if _, _, err := f.start(ctx, f.s, "o-late", 700); err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.s, 3))
		sg := f.wait("o-late", saga.Completed, saga.Compensated)
		var aerr error
		select {
		case aerr = <-abortErr:
		case <-time.After(30 * time.Second):
			t.Fatal("Abort did not return")
		}
		// Refused: ErrLastStepApplied (matching ErrNotRunning) when Abort
		// reads the applied step before the advancer completes the saga,
		// plain ErrNotRunning after it (SQLite may hand the write lock to the
		// advancer first).
		if !errors.Is(aerr, saga.ErrNotRunning) {
			t.Errorf("Abort while the last step commits: %v, want a refusal (ErrLastStepApplied or ErrNotRunning)", aerr)
		}
		if sg.State != saga.Completed {
			t.Errorf("saga %s, want completed (the abort was refused)", sg.State)
		}
		var status string
		var released int64
		if err := d.Pool().QueryRow(ctx, `SELECT status FROM orders WHERE id = 'o-late'`).Scan(&status); err != nil || status != "confirmed" {
			t.Errorf("order %q %v, want confirmed", status, err)
		}
		if err := d.Pool().QueryRow(ctx, `SELECT released FROM reservations WHERE order_id = 'o-late'`).Scan(&released); err != nil || released != 0 {
			t.Errorf("reservation released=%d %v, want 0", released, err)
		}
		if _, _, charged, refunded := f.p.PaymentTotals(); charged != 700 || refunded != 0 {
			t.Errorf("charged %d refunded %d, want 700 and 0", charged, refunded)
		}
		f.invariants()
		if err := f.s.Abort(ctx, "o-late", "again"); !errors.Is(err, saga.ErrNotRunning) {
			t.Errorf("abort of a completed saga: %v", err)
		}
	})
}

// The garbage collector (package retention) deletes a finished saga's
// barrier rows, then the saga. An action redriven in between (or after)
// finds no barrier row: it is refused because the saga finished, and never
// reaches the provider.
func TestSagaRedrivenActionOfAGarbageCollectedSagaIsRefused(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		f.p.Inject(fakeprovider.Fault{On: fakeprovider.Charges, Status: http.StatusPaymentRequired})
		if _, _, err := f.start(ctx, f.s, "o-gc", 700); err != nil {
			t.Fatal(err)
		}
		stop := f.run(f.worker(f.s, 3))
		f.wait("o-gc", saga.Compensated)
		stop()
		calls := f.p.Charges()["saga/o-gc/charge/do"].Calls
		// The steps are gone (the GC's first table), the saga not yet.
		testdb.Exec(t, d, `DELETE FROM `+d.Table("saga_steps")+` WHERE saga_id = 'o-gc'`)
		if err := f.l.Retry(ctx, "saga/o-gc/charge/do"); err != nil {
			t.Fatal(err)
		}
		f.run(f.worker(f.s, 3))
		f.waitRefused("saga/o-gc/charge/do")
		if c := f.p.Charges()["saga/o-gc/charge/do"].Calls; c != calls {
			t.Fatalf("the redriven action of a finished saga called the provider (%d calls, was %d)", c, calls)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("saga_steps")+` WHERE saga_id = 'o-gc'`); n != 0 {
			t.Fatalf("the refused action wrote %d barrier rows", n)
		}
		if sg, err := f.s.Get(ctx, "o-gc"); err != nil || sg.State != saga.Compensated {
			t.Fatalf("saga after the refused action: %+v %v", sg, err)
		}
	})
}
