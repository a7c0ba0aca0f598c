package effect_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// forEachStore runs test on SQLite, pgx and database/sql PostgreSQL
// (testdb.EachDriver), each on its own migrated store.
func forEachStore(t *testing.T, test func(t *testing.T, d store.Driver[any]), opts ...testdb.Option) {
	t.Helper()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { test(t, e.D) }, opts...)
}

func erase[TTx any](d store.Driver[TTx]) store.Driver[any] { return testdb.Erase(d) }

// flaky wraps a driver whose database can be made unreachable: it simulates
// a worker process that crashes (or loses its database) at a chosen moment.
type flaky struct {
	store.Driver[any]
	down *atomic.Bool
}

var errDown = errors.New("test: database unreachable (simulated crash)")

func (f flaky) Pool() store.Querier     { return flakyQ{f.Driver.Pool(), f.down} }
func (f flaky) Tx(tx any) store.Querier { return flakyQ{f.Driver.Tx(tx), f.down} }
func (f flaky) Begin(ctx context.Context) (any, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.Driver.Begin(ctx)
}

type flakyQ struct {
	q    store.Querier
	down *atomic.Bool
}

func (f flakyQ) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if f.down.Load() {
		return 0, errDown
	}
	return f.q.Exec(ctx, sql, args...)
}
func (f flakyQ) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.q.Query(ctx, sql, args...)
}
func (f flakyQ) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	if f.down.Load() {
		return errRow{}
	}
	return f.q.QueryRow(ctx, sql, args...)
}

type errRow struct{}

func (errRow) Scan(...any) error { return errDown }

func newProvider(t *testing.T) (*fakeprovider.Provider, *fakeprovider.Client) {
	t.Helper()
	p := fakeprovider.New(fakeprovider.Config{})
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() { p.Close(); srv.Close() })
	c := fakeprovider.NewClient(srv.URL)
	c.Timeout = 10 * time.Second
	return p, c
}

func newLedger(t *testing.T, d store.Driver[any], cfg effect.Config) *effect.Ledger[any] {
	t.Helper()
	l, err := effect.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func schedule(t *testing.T, d store.Driver[any], l *effect.Ledger[any], effs ...effect.Effect) {
	t.Helper()
	err := store.InTx(context.Background(), d, func(tx any) error {
		for _, e := range effs {
			if _, _, err := l.ScheduleTx(context.Background(), tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fastWorker(t *testing.T, l *effect.Ledger[any], cfg effect.WorkerConfig[any]) *effect.Worker[any] {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	if cfg.Backoff == nil {
		cfg.Backoff = effect.FullJitter(time.Millisecond, 10*time.Millisecond)
	}
	w, err := effect.NewWorker(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runWorker runs w until the returned stop function is called.
func runWorker(t *testing.T, w *effect.Worker[any]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once atomic.Bool
	stop = func() {
		if once.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond (bounded) until it holds; no timing assertion, only a
// generous bound against hangs.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func counts(t *testing.T, l *effect.Ledger[any]) map[effect.State]int64 {
	t.Helper()
	c, err := l.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func get(t *testing.T, l *effect.Ledger[any], key string) effect.Effect {
	t.Helper()
	e, err := l.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		l := newLedger(t, d, effect.Config{})
		e := effect.Effect{Key: "order-confirmed-email:1", Kind: "email", Payload: []byte(`{"to":"a@x","n":1}`)}

		var created bool
		err := store.InTx(ctx, d, func(tx any) error {
			got, c, err := l.ScheduleTx(ctx, tx, e)
			created = c
			if err == nil && (got.State != effect.Pending || got.Attempts != 0 || got.Kind != "email") {
				t.Errorf("scheduled %+v", got)
			}
			return err
		})
		if err != nil || !created {
			t.Fatalf("first schedule: created=%v err=%v", created, err)
		}
		// Same intent again (JSON re-ordered): no-op returning the existing row.
		err = store.InTx(ctx, d, func(tx any) error {
			got, c, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: e.Key, Kind: "email", Payload: []byte(`{"n":1, "to":"a@x"}`)})
			created = c
			if err == nil && got.Key != e.Key {
				t.Errorf("got %+v", got)
			}
			return err
		})
		if err != nil || created {
			t.Fatalf("second schedule: created=%v err=%v", created, err)
		}
		// Same key, other payload or kind: loud mismatch, nothing written.
		for _, bad := range []effect.Effect{
			{Key: e.Key, Kind: "email", Payload: []byte(`{"to":"b@x","n":1}`)},
			{Key: e.Key, Kind: "sms", Payload: e.Payload},
		} {
			err = store.InTx(ctx, d, func(tx any) error { _, _, err := l.ScheduleTx(ctx, tx, bad); return err })
			var fm *idem.FingerprintMismatchError
			if !errors.Is(err, idem.ErrFingerprintMismatch) || !errors.As(err, &fm) {
				t.Fatalf("mismatch: err = %v", err)
			}
		}
		// Rolled back with the business transaction: no effect.
		_ = store.InTx(ctx, d, func(tx any) error {
			if _, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "rolled-back", Kind: "email"}); err != nil {
				t.Fatal(err)
			}
			return errors.New("business rule failed")
		})
		if _, err := l.Get(ctx, "rolled-back"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("rolled-back effect: err = %v", err)
		}
		// Invalid input.
		for _, bad := range []effect.Effect{{Key: "", Kind: "email"}, {Key: "k", Kind: ""}} {
			err = store.InTx(ctx, d, func(tx any) error { _, _, err := l.ScheduleTx(ctx, tx, bad); return err })
			if !errors.Is(err, idem.ErrInvalidInput) {
				t.Fatalf("invalid %+v: err = %v", bad, err)
			}
		}
		if c := counts(t, l); c[effect.Pending] != 1 || len(c) != 1 {
			t.Fatalf("counts = %v", c)
		}
	})
}

func TestConcurrentScheduleOneRow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		const n = 8
		created := make(chan bool, n)
		errs := make(chan error, n)
		for range n {
			go func() {
				err := store.InTx(context.Background(), d, func(tx any) error {
					_, c, err := l.ScheduleTx(context.Background(), tx, effect.Effect{Key: "k", Kind: "email", Payload: []byte("p")})
					created <- c && err == nil
					return err
				})
				errs <- err
			}()
		}
		nc := 0
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if <-created {
				nc++
			}
		}
		if nc != 1 || testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("effects")) != 1 {
			t.Fatalf("created %d times", nc)
		}
	})
}

func TestWorkerPerformsOnceWithTheKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		p, c := newProvider(t)
		l := newLedger(t, d, effect.Config{})
		const n = 50
		var effs []effect.Effect
		for i := range n {
			effs = append(effs, effect.Effect{Key: fmt.Sprintf("email:%d", i), Kind: "email", Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
		}
		schedule(t, d, l, effs...)
		schedule(t, d, l, effs...) // duplicate scheduling: no-op
		w := fastWorker(t, l, effect.WorkerConfig[any]{Concurrency: 4})
		if err := w.Register("email", c.Send); err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w)
		waitFor(t, "all completed", func() bool { return counts(t, l)[effect.Completed] == n })
		stop()
		if p.UniqueEffects() != n || p.Calls() != n {
			t.Fatalf("provider: calls=%d unique=%d, want %d", p.Calls(), p.UniqueEffects(), n)
		}
		for k, pe := range p.Effects() {
			e := get(t, l, k)
			if string(e.Result) != string(pe.Result) || e.Attempts != 1 || e.CompletedAt.IsZero() || e.ExpiresAt.IsZero() {
				t.Fatalf("effect %s: %+v, provider result %s", k, e, pe.Result)
			}
		}
	})
}

func TestTransientThenSuccess(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		p, c := newProvider(t)
		p.FailNext(2, 503)
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "k", Kind: "email", Payload: []byte("x")})
		w := fastWorker(t, l, effect.WorkerConfig[any]{})
		_ = w.Register("email", c.Send)
		stop := runWorker(t, w)
		waitFor(t, "completed", func() bool { return get(t, l, "k").State == effect.Completed })
		stop()
		if e := get(t, l, "k"); e.Attempts != 3 || e.LastError != "" {
			t.Fatalf("effect %+v", e)
		}
		if p.Calls() != 3 || p.UniqueEffects() != 1 {
			t.Fatalf("calls=%d unique=%d", p.Calls(), p.UniqueEffects())
		}
	})
}

func TestPermanentFailureDeadLetterAndRedrive(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		testdb.Exec(t, d, `CREATE TABLE parked (effect_key text PRIMARY KEY, cause text NOT NULL)`)
		p, c := newProvider(t)
		p.FailAlways(400)
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "bad", Kind: "email", Payload: []byte("x")},
			effect.Effect{Key: "flaky", Kind: "sms", Payload: []byte("y")})
		var smsCalls atomic.Int64
		w := fastWorker(t, l, effect.WorkerConfig[any]{
			MaxAttempts: 3,
			OnFailed: func(ctx context.Context, tx any, e effect.Effect, cause error) error {
				_, err := d.Tx(tx).Exec(ctx, `INSERT INTO parked (effect_key, cause) VALUES ($1, $2)`, e.Key, idem.ErrorClass(cause))
				return err
			},
		})
		_ = w.Register("email", c.Send)
		_ = w.Register("sms", func(context.Context, string, []byte) ([]byte, error) {
			smsCalls.Add(1)
			return nil, errors.New("upstream 503")
		})
		stop := runWorker(t, w)
		waitFor(t, "both failed", func() bool { return counts(t, l)[effect.Failed] == 2 })
		stop()
		if bad := get(t, l, "bad"); bad.Attempts != 1 || bad.LastError == "" {
			t.Fatalf("permanent: %+v", bad)
		}
		if fl := get(t, l, "flaky"); fl.Attempts != 3 || smsCalls.Load() != 3 {
			t.Fatalf("exhausted: %+v calls=%d", fl, smsCalls.Load())
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM parked`); n != 2 {
			t.Fatalf("dead letters = %d", n)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM parked WHERE effect_key = 'bad' AND cause = 'permanent'`); n != 1 {
			t.Fatal("permanent cause not recorded")
		}
		failed, err := l.List(ctx, effect.Failed, 10)
		if err != nil || len(failed) != 2 {
			t.Fatalf("list failed: %v %v", failed, err)
		}
		// Redrive after the provider is fixed.
		if err := l.Retry(ctx, "nope"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("retry unknown: %v", err)
		}
		p.Reset()
		if err := l.Retry(ctx, "bad"); err != nil {
			t.Fatal(err)
		}
		if err := l.Retry(ctx, "bad"); !errors.Is(err, effect.ErrNotRetryable) {
			t.Fatalf("retry pending: %v", err)
		}
		w2 := fastWorker(t, l, effect.WorkerConfig[any]{})
		_ = w2.Register("email", c.Send)
		stop = runWorker(t, w2)
		waitFor(t, "redriven", func() bool { return get(t, l, "bad").State == effect.Completed })
		stop()
		if p.UniqueEffects() != 1 {
			t.Fatalf("unique = %d", p.UniqueEffects())
		}
		// An operator resolves the other one by hand.
		if err := l.Resolve(ctx, "flaky", []byte("sent by hand")); err != nil {
			t.Fatal(err)
		}
		if e := get(t, l, "flaky"); e.State != effect.Completed || string(e.Result) != "sent by hand" {
			t.Fatalf("resolved %+v", e)
		}
	})
}

// Drill 7: the worker performs the provider call, the provider records the
// effect, and the worker crashes before recording completion. On recovery the
// same key is sent again and the provider reports one unique effect.
func TestDrill7CrashAfterProviderCall(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		p, c := newProvider(t)
		down := &atomic.Bool{}
		crashing := newLedger(t, flaky{d, down}, effect.Config{Lease: 200 * time.Millisecond, CallTimeout: 200 * time.Millisecond})
		schedule(t, d, crashing, effect.Effect{Key: "order-confirmed-email:7", Kind: "email", Payload: []byte(`{"order":7}`)})

		w1 := fastWorker(t, crashing, effect.WorkerConfig[any]{})
		_ = w1.Register("email", func(ctx context.Context, key string, payload []byte) ([]byte, error) {
			res, err := c.Send(ctx, key, payload)
			if err == nil {
				down.Store(true) // the process dies right after the provider answered
			}
			return res, err
		})
		stop1 := runWorker(t, w1)
		waitFor(t, "the crash", down.Load)
		stop1()
		if e := get(t, newLedger(t, d, effect.Config{}), "order-confirmed-email:7"); e.State != effect.InProgress {
			t.Fatalf("after the crash the effect is %s", e.State)
		}
		if p.UniqueEffects() != 1 {
			t.Fatal("provider did not perform the effect")
		}

		// The recovering worker waits out the crashed worker's 200 ms lease;
		// its own lease is long, so a loaded machine cannot time its call out.
		l := newLedger(t, d, effect.Config{Lease: 10 * time.Second})
		w2 := fastWorker(t, l, effect.WorkerConfig[any]{})
		var keys []string
		_ = w2.Register("email", func(ctx context.Context, key string, payload []byte) ([]byte, error) {
			keys = append(keys, key)
			return c.Send(ctx, key, payload)
		})
		stop2 := runWorker(t, w2)
		waitFor(t, "recovery", func() bool { return get(t, l, "order-confirmed-email:7").State == effect.Completed })
		stop2()
		e := get(t, l, "order-confirmed-email:7")
		pe, _ := p.Effect("order-confirmed-email:7")
		// One unique effect, however many calls a loaded machine needed (a
		// call cut off by its timeout is retried, always with the same key).
		if p.UniqueEffects() != 1 || p.Calls() < 2 || len(keys) < 1 {
			t.Fatalf("calls=%d unique=%d keys=%v", p.Calls(), p.UniqueEffects(), keys)
		}
		for _, call := range p.CallLog() {
			if call.Key != "order-confirmed-email:7" {
				t.Fatalf("a call used key %q", call.Key)
			}
		}
		if string(e.Result) != string(pe.Result) || e.Attempts < 2 {
			t.Fatalf("effect %+v, provider result %s", e, pe.Result)
		}
	})
}

// Drill 12: the provider performs the effect and then times out; the worker
// retries with the same key and the provider reports one unique effect.
func TestDrill12ProviderTimesOut(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		p, c := newProvider(t)
		c.Timeout = 50 * time.Millisecond
		p.TimeoutAfterEffect(1)
		p.DropAfterEffect(1)
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "charge:12", Kind: "charge", Payload: []byte(`{"amount":1200}`)})
		w := fastWorker(t, l, effect.WorkerConfig[any]{})
		_ = w.Register("charge", c.Send)
		stop := runWorker(t, w)
		waitFor(t, "completed", func() bool { return get(t, l, "charge:12").State == effect.Completed })
		stop()
		e := get(t, l, "charge:12")
		pe, _ := p.Effect("charge:12")
		// At least the two failed calls and the successful one; a slow
		// machine may time out more calls, each an attempt with the same key.
		if p.UniqueEffects() != 1 || p.Calls() < 3 || e.Attempts < 3 || string(e.Result) != string(pe.Result) {
			t.Fatalf("calls=%d unique=%d effect=%+v", p.Calls(), p.UniqueEffects(), e)
		}
		for _, call := range p.CallLog() {
			if call.Key != "charge:12" {
				t.Fatalf("a retry used key %q", call.Key)
			}
		}
	})
}

// A zombie worker that finishes after its lease was taken over cannot
// overwrite the result of the worker that took over.
func TestZombieWorkerIsFenced(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		cfg := effect.Config{Lease: 300 * time.Millisecond, CallTimeout: 300 * time.Millisecond}
		lz := newLedger(t, d, cfg)
		schedule(t, d, lz, effect.Effect{Key: "k", Kind: "email"})
		zombieIn, zombieOut := make(chan struct{}), make(chan struct{})
		wz := fastWorker(t, lz, effect.WorkerConfig[any]{Concurrency: 1}) // its one slot stays busy
		_ = wz.Register("email", func(ctx context.Context, key string, _ []byte) ([]byte, error) {
			close(zombieIn)
			<-zombieOut // stalls past its lease (a GC pause, a partition)
			return []byte("zombie"), nil
		})
		stopZ := runWorker(t, wz)
		<-zombieIn

		l := newLedger(t, d, cfg)
		w := fastWorker(t, l, effect.WorkerConfig[any]{})
		_ = w.Register("email", func(context.Context, string, []byte) ([]byte, error) { return []byte("owner"), nil })
		stop := runWorker(t, w)
		waitFor(t, "take-over", func() bool { return get(t, l, "k").State == effect.Completed })
		stop()
		close(zombieOut) // the zombie wakes up and tries to record "zombie"
		stopZ()
		e := get(t, l, "k")
		if string(e.Result) != "owner" || e.Token < 2 || e.State != effect.Completed {
			t.Fatalf("zombie overwrote the result: %+v", e)
		}
	})
}

func TestBreakerAndRateLimit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		var effs []effect.Effect
		for i := range 10 {
			effs = append(effs, effect.Effect{Key: fmt.Sprintf("a:%d", i), Kind: "open"}, effect.Effect{Key: fmt.Sprintf("b:%d", i), Kind: "slow"})
		}
		schedule(t, d, l, effs...)
		var calls atomic.Int64
		perform := func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return []byte("ok"), nil }
		br := &testBreaker{}
		br.open.Store(true)
		w := fastWorker(t, l, effect.WorkerConfig[any]{})
		_ = w.Register("open", perform, effect.WithBreaker(br))
		// One call per hour with bursts of 3: exactly 3 calls, the rest wait.
		_ = w.Register("slow", perform, effect.WithRateLimit(1.0/3600, 3))
		stop := runWorker(t, w)
		waitFor(t, "the burst", func() bool { return calls.Load() == 3 })
		waitFor(t, "breaker polled", func() bool { return br.allows.Load() > 5 })
		stop()
		c := counts(t, l)
		if c[effect.Completed] != 3 || c[effect.Pending] != 17 || calls.Load() != 3 {
			t.Fatalf("counts = %v, calls = %d", c, calls.Load())
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("effects")+` WHERE state = 'pending' AND attempts = 0`); n != 17 {
			t.Fatalf("throttled effects were claimed: %d untouched", n)
		}
		// Closing the breaker lets the kind drain; Record sees the outcomes.
		br.open.Store(false)
		w2 := fastWorker(t, l, effect.WorkerConfig[any]{})
		_ = w2.Register("open", perform, effect.WithBreaker(br))
		stop = runWorker(t, w2)
		waitFor(t, "drained", func() bool { return counts(t, l)[effect.Completed] == 13 })
		stop()
		if br.records.Load() != 10 {
			t.Fatalf("breaker recorded %d outcomes", br.records.Load())
		}
	})
}

type testBreaker struct {
	open    atomic.Bool
	allows  atomic.Int64
	records atomic.Int64
}

func (b *testBreaker) Allow() error {
	b.allows.Add(1)
	if b.open.Load() {
		return errors.New("circuit open")
	}
	return nil
}
func (b *testBreaker) Record(error) { b.records.Add(1) }

func TestWorkerConfigErrors(t *testing.T) {
	t.Parallel()
	d := erase(testdb.SQLite(t))
	if _, err := effect.New(d, effect.Config{Lease: time.Second, CallTimeout: 2 * time.Second}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("CallTimeout > Lease: %v", err)
	}
	l := newLedger(t, d, effect.Config{})
	w := fastWorker(t, l, effect.WorkerConfig[any]{})
	if err := w.Run(context.Background()); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("Run without kinds: %v", err)
	}
	perform := func(context.Context, string, []byte) ([]byte, error) { return nil, nil }
	if err := w.Register("k", perform); err != nil {
		t.Fatal(err)
	}
	if err := w.Register("k", perform); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("double register: %v", err)
	}
	if _, err := effect.NewWorker(l, effect.WorkerConfig[any]{Concurrency: -1}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("negative concurrency: %v", err)
	}
	if _, err := effect.New(d, effect.Config{ExpiredLease: 7}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("unknown policy: %v", err)
	}
}

func TestFullJitterBounds(t *testing.T) {
	t.Parallel()
	b := effect.FullJitter(10*time.Millisecond, time.Second)
	for attempt := range 40 {
		for range 50 {
			d := b(attempt)
			ceil := min(time.Second, 10*time.Millisecond<<max(attempt-1, 0))
			if attempt > 20 {
				ceil = time.Second
			}
			if d < 0 || d > ceil {
				t.Fatalf("attempt %d: %v outside [0,%v]", attempt, d, ceil)
			}
		}
	}
}
