package idemhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

func TestTwoPhaseExecutesAndReplays(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		var sawTx bool
		a := &app{hook: func(r *http.Request) int {
			_, err := e.txString(r.Context(), `SELECT 'x'`)
			sawTx = err == nil
			return 0
		}}
		h := e.handler(t, idemhttp.Config{Mode: idemhttp.TwoPhase}, a)
		first := do(h, req{tenant: "acme", key: "k", body: `{"qty":1}`})
		wantStatus(t, first, 201)
		if sawTx {
			t.Fatal("a two-phase handler got a transaction")
		}
		wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{"qty":1}`}), first)
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{"qty":2}`}), 422)
		if n := e.count(t, `SELECT count(*) FROM orders WHERE idem_key = 'k'`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// Not-stored outcomes delete the pending record so a retry executes.
func TestTwoPhaseFailureReleasesKey(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		fail := "panic"
		a := &app{hook: func(r *http.Request) int {
			mu.Lock()
			defer mu.Unlock()
			switch fail {
			case "panic":
				panic("boom")
			case "502":
				return http.StatusBadGateway
			}
			return 0
		}}
		h := e.handler(t, idemhttp.Config{Mode: idemhttp.TwoPhase}, a)
		func() {
			defer func() { _ = recover() }()
			do(h, req{tenant: "acme", key: "k", body: `{}`})
		}()
		if n := e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d key records after a panic, want 0", n)
		}
		mu.Lock()
		fail = "502"
		mu.Unlock()
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), 502)
		if n := e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d key records after a 502, want 0", n)
		}
		mu.Lock()
		fail = ""
		mu.Unlock()
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), 201)
		if a.execs.Load() != 3 {
			t.Fatalf("%d executions, want 3", a.execs.Load())
		}
	})
}

// zombie starts a request whose handler blocks (a hung or crashed owner:
// it never renews or finishes its lease) until release is closed.
func zombie(t *testing.T, e *env, cfg idemhttp.Config) (h http.Handler, a *app, release chan struct{}, result chan *httptest.ResponseRecorder) {
	entered := make(chan struct{})
	release = make(chan struct{})
	var first atomic.Bool
	a = &app{hook: func(r *http.Request) int {
		// Only the first execution hangs (sync.Once would block the others).
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return 0
	}}
	cfg.Mode = idemhttp.TwoPhase
	cfg.Lease = time.Hour // on the test clock; the handler's real deadline is an hour away
	h = e.handler(t, cfg, a)
	result = make(chan *httptest.ResponseRecorder, 1)
	go func() { result <- do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}) }()
	<-entered
	return h, a, release, result
}

// Two-phase crash after pending: recovered after the lease, not before; the
// zombie's late finalisation is rejected by the fencing token.
func TestTwoPhaseLeaseRecovery(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		h, a, release, zombieResult := zombie(t, e, idemhttp.Config{})
		held, err := e.lookup("acme", op, "z")
		if err != nil {
			t.Fatal(err)
		}
		// Before the lease ends the key is in flight.
		e.clock.Add(59 * time.Minute)
		wantProblem(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), 409, idemhttp.TypeInFlight)
		// A different payload is still a mismatch, not a takeover.
		e.clock.Add(2 * time.Minute)
		wantProblem(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":2}`}), 422, idemhttp.TypeKeyReused)
		// After the lease, a retry takes over and re-executes with the same key.
		taken := do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`})
		wantStatus(t, taken, 201)
		rec, err := e.lookup("acme", op, "z")
		if err != nil || rec.Token != held.Token+1 || rec.State != idemhttp.StateCompleted {
			t.Fatalf("after takeover: %+v %v", rec, err)
		}
		// The zombie wakes up and tries to finalise: rejected, nothing overwritten.
		close(release)
		wantProblem(t, <-zombieResult, 409, idemhttp.TypeLeaseLost)
		wantReplay(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), taken)
		if a.execs.Load() != 2 {
			t.Fatalf("%d executions, want 2 (zombie + takeover)", a.execs.Load())
		}
		// Both executions carried the same key downstream, so a downstream
		// that honours idempotency keys sees one intent.
		if n := e.count(t, `SELECT count(DISTINCT idem_key) FROM orders`); n != 1 {
			t.Fatalf("%d distinct keys propagated, want 1", n)
		}
	})
}

// Hold: an abandoned execution is held for an operator; Forget resolves it.
func TestTwoPhaseHoldPolicy(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		h, a, release, zombieResult := zombie(t, e, idemhttp.Config{ExpiredPolicy: idem.Hold})
		e.clock.Add(61 * time.Minute)
		for range 2 {
			wantProblem(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), 409, idemhttp.TypeNeedsReconciliation)
		}
		rec, err := e.lookup("acme", op, "z")
		if err != nil || rec.State != idemhttp.StateFailed {
			t.Fatalf("held record: %+v %v", rec, err)
		}
		close(release)
		wantProblem(t, <-zombieResult, 409, idemhttp.TypeLeaseLost)
		if err := e.forget("acme", op, "z"); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), 201)
		if a.execs.Load() != 2 {
			t.Fatalf("%d executions, want 2", a.execs.Load())
		}
	})
}

// WaitForInFlight: the duplicate waits for the owner and replays.
func TestTwoPhaseWaitForInFlight(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		h, a, release, first := zombie(t, e, idemhttp.Config{WaitForInFlight: 10 * time.Second})
		waited := make(chan *httptest.ResponseRecorder)
		go func() { waited <- do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}) }()
		time.Sleep(30 * time.Millisecond) // let it start polling (not required for correctness)
		close(release)
		orig := <-first
		wantStatus(t, orig, 201)
		wantReplay(t, <-waited, orig)
		if a.execs.Load() != 1 {
			t.Fatalf("%d executions, want 1", a.execs.Load())
		}
	})
}

// TestForgetRefusesAKeyInFlight: Forget does not delete the record of an
// execution in progress with a live lease (a retry would then run beside
// it); the key still answers 409 and the execution finishes and is
// recorded. A finished key is forgotten.
func TestForgetRefusesAKeyInFlight(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		h, a, release, result := zombie(t, e, idemhttp.Config{})
		if err := e.forget("acme", op, "z"); !errors.Is(err, idem.ErrInProgress) {
			close(release)
			t.Fatalf("forget of a key in flight: %v, want ErrInProgress", err)
		}
		wantProblem(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), 409, idemhttp.TypeInFlight)
		close(release)
		done := <-result
		wantStatus(t, done, 201)
		wantReplay(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), done)
		if a.execs.Load() != 1 {
			t.Fatalf("%d executions, want 1", a.execs.Load())
		}
		if err := e.forget("acme", op, "z"); err != nil {
			t.Fatalf("forget of a completed key: %v", err)
		}
	})
}

// TestAForgottenKeyDoesNotHandItsTokenBack: an execution whose key was held
// and then forgotten, still running, must not finish the record of the
// execution that started after the forget: a record's first token is its
// creation time, so the new record's token is not the old one's.
func TestAForgottenKeyDoesNotHandItsTokenBack(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		entered := make(chan struct{}, 2)
		releases := []chan struct{}{make(chan struct{}), make(chan struct{})}
		var n atomic.Int64
		a := &app{hook: func(r *http.Request) int {
			if i := n.Add(1) - 1; i < 2 {
				entered <- struct{}{}
				<-releases[i]
			}
			return 0
		}}
		h := e.handler(t, idemhttp.Config{Mode: idemhttp.TwoPhase, Lease: time.Hour, ExpiredPolicy: idem.Hold}, a)
		send := func() chan *httptest.ResponseRecorder {
			c := make(chan *httptest.ResponseRecorder, 1)
			go func() { c <- do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}) }()
			<-entered
			return c
		}
		first := send()
		e.clock.Add(61 * time.Minute) // its lease runs out: the key is held
		wantProblem(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), 409, idemhttp.TypeNeedsReconciliation)
		if err := e.forget("acme", op, "z"); err != nil {
			t.Fatal(err)
		}
		second := send()
		close(releases[0])
		wantProblem(t, <-first, 409, idemhttp.TypeLeaseLost)
		close(releases[1])
		done := <-second
		wantStatus(t, done, 201)
		wantReplay(t, do(h, req{tenant: "acme", key: "z", body: `{"qty":1}`}), done)
	})
}
