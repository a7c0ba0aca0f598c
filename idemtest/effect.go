package idemtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemtest/fakeprovider"
	internalprovider "github.com/idemkit/idem/internal/fakeprovider"
)

// EffectCall is the user's external call under test.
type EffectCall struct {
	// Backend is the database of the effect ledger (default: a fresh
	// SQLite file).
	Backend Backend
	// Call builds the call that effect.Ledger.Do runs, on a client of the
	// fake provider (an API that honours Idempotency-Key the way Stripe's
	// does, and counts the effects it performs; see package
	// github.com/idemkit/idem/idemtest/fakeprovider). The call receives
	// the effect key and must hand it to the provider as its idempotency
	// key: through the client's Send, Charge or Refund, or through an
	// HTTP client of the team's own pointed at the client's BaseURL.
	// Required.
	Call func(provider *fakeprovider.Client) effect.CallFunc
}

// effectLease is the ledger's lease in Effect; the ledger's clock is moved
// past it to expire a lease.
const effectLease = 30 * time.Second

// Effect proves that the user's external call, guarded by the effect
// ledger (effect.Ledger.Do), reaches the provider once in effect, on a
// fresh key per scenario: the call and a second Do of the key (answered
// from the ledger); a crash between the provider call and the record,
// then the retry once the lease expired (the provider is called again with
// the same key and must not act twice); a lease that expires while the
// call runs, another caller taking the key over (one effect, the late
// caller's result is refused). The invariant is the provider's own: one
// effect per key, however many calls.
//
// The call is written against the provider's client and API in package
// github.com/idemkit/idem/idemtest/fakeprovider, which any module can
// import.
func Effect(t testing.TB, c EffectCall) {
	t.Helper()
	if c.Call == nil {
		t.Fatalf("idemtest.Effect: EffectCall.Call is required")
		return
	}
	d, err := c.Backend.open(t)
	if err != nil {
		t.Fatalf("idemtest.Effect: open the store: %v", err)
		return
	}
	p := internalprovider.New(internalprovider.Config{})
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	in := &injector{}
	r := &effectRun{t: t, p: p, in: in, clock: time.Now()}
	r.ledger, err = effect.New[*sql.Tx](newFaultDriver(d, in), effect.Config{Lease: effectLease, CallTimeout: 10 * time.Second, Now: r.now})
	if err != nil {
		t.Fatalf("idemtest.Effect: %v", err)
		return
	}
	r.call = c.Call(&fakeprovider.Client{BaseURL: srv.URL, HTTPClient: srv.Client()})
	if r.call == nil {
		t.Fatalf("idemtest.Effect: EffectCall.Call returned nil")
		return
	}
	for _, sc := range []func() bool{r.once, r.crashBeforeRecord, r.leaseExpiresMidRun} {
		if !sc() {
			return
		}
	}
}

// effectRun is one Effect run: the ledger on a clock idemtest moves.
type effectRun struct {
	t      testing.TB
	p      *internalprovider.Provider
	in     *injector
	ledger *effect.Ledger[*sql.Tx]
	call   effect.CallFunc
	seq    int

	mu    sync.Mutex
	clock time.Time
	keys  []string // keys of this run: the provider must have one effect for each
}

func (r *effectRun) now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock
}

// expireLease moves the ledger's clock past the lease.
func (r *effectRun) expireLease() {
	r.mu.Lock()
	r.clock = r.clock.Add(effectLease + time.Second)
	r.mu.Unlock()
}

// calls is how many calls the provider received, on any of its APIs (the
// e-mail API and the payment API).
func (r *effectRun) calls() int { return r.p.Calls() + r.p.PaymentCalls() }

// performed is how many effects the provider performed, one per
// idempotency key (or per keyless call): e-mails sent, charges made,
// refunds and cancellations.
func (r *effectRun) performed() int {
	return r.p.UniqueEffects() + len(r.p.Charges()) + len(r.p.Refunds())
}

const hintEffectKey = "the call must hand the provider the key that Ledger.Do passes to it (key, the CallFunc's " +
	"second argument) as its idempotency key: a call without it, or with a key of its own (a new UUID, a timestamp, " +
	"an attempt number), makes the provider act again when the ledger re-calls after a crash or an expired lease"

func (r *effectRun) scenario(name string) (*story, string) {
	r.seq++
	key := fmt.Sprintf("idemtest-effect-%d-%d", r.seq, time.Now().UnixNano())
	r.keys = append(r.keys, key)
	s := &story{t: r.t, title: fmt.Sprintf("effect, scenario %q (key %s)", name, key)}
	s.ran = func() string {
		return fmt.Sprintf("the provider received %d call(s) and performed %d effect(s) in this run", r.calls(), r.performed())
	}
	s.check = func(context.Context) error {
		if got, want := r.performed(), len(r.keys); got != want {
			return fmt.Errorf("the provider performed %d effect(s) for %d intended (one per key)", got, want)
		}
		return nil
	}
	return s, key
}

// do runs Ledger.Do for key and tells the step.
func (r *effectRun) do(s *story, label, key string, fn effect.CallFunc) ([]byte, error) {
	if fn == nil {
		fn = r.call
	}
	res, err := r.ledger.Do(context.Background(), key, fn)
	if err != nil {
		s.step("%s: error: %v", label, err)
	} else {
		s.step("%s: %q", label, res)
	}
	return res, err
}

func (r *effectRun) once() bool {
	r.t.Helper()
	s, key := r.scenario("once, then again")
	first, err := r.do(s, "Do, attempt 1", key, nil)
	if err != nil {
		s.fail("the call failed against a provider that works", hintEffectKey)
		return false
	}
	if !s.invariant(hintEffectKey) {
		return false
	}
	calls := r.calls()
	again, err := r.do(s, "Do, attempt 2", key, nil)
	if err != nil || !bytes.Equal(again, first) || r.calls() != calls {
		s.fail("a second Do of a completed key must return the recorded result without calling the provider", "")
		return false
	}
	return s.invariant(hintEffectKey)
}

func (r *effectRun) crashBeforeRecord() bool {
	r.t.Helper()
	s, key := r.scenario("crash between the provider call and the record")
	r.in.arm(faultEffectRecord)
	_, err := r.do(s, "Do, attempt 1, "+faultEffectRecord.String(), key, nil)
	fired := r.in.disarm()
	if !fired {
		s.fail(fmt.Sprintf("the fault was never reached: Do returned %v without recording a result", err), hintEffectKey)
		return false
	}
	r.expireLease()
	s.step("the lease of attempt 1 expired")
	res, err := r.do(s, "Do, attempt 2 (takes the key over and calls again)", key, nil)
	if err != nil {
		s.fail("the retry after the lease failed", hintEffectKey)
		return false
	}
	if !s.invariant(hintEffectKey) {
		return false
	}
	again, err := r.do(s, "Do, attempt 3", key, nil)
	if err != nil || !bytes.Equal(again, res) {
		s.fail("attempt 3 must return attempt 2's recorded result", "")
		return false
	}
	return true
}

func (r *effectRun) leaseExpiresMidRun() bool {
	r.t.Helper()
	s, key := r.scenario("lease expires mid-run")
	var (
		second    []byte
		secondErr error
	)
	_, err := r.do(s, "Do, attempt 1 (its lease expires during the call; attempt 2 takes over)", key, func(ctx context.Context, k string) ([]byte, error) {
		res, err := r.call(ctx, k)
		r.expireLease()
		second, secondErr = r.do(s, "Do, attempt 2, while attempt 1 still runs", key, nil)
		return res, err
	})
	if secondErr != nil {
		s.fail("attempt 2 must take the expired lease over and complete", hintEffectKey)
		return false
	}
	if !errors.Is(err, idem.ErrLeaseLost) {
		s.fail(fmt.Sprintf("attempt 1 returned %v, want an error wrapping idem.ErrLeaseLost (its result must not be recorded)", err), "")
		return false
	}
	if !s.invariant(hintEffectKey) {
		return false
	}
	again, err := r.do(s, "Do, attempt 3", key, nil)
	if err != nil || !bytes.Equal(again, second) {
		s.fail("attempt 3 must return the result of attempt 2, the owner that took over", "")
		return false
	}
	return true
}
