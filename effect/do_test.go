package effect_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/store"
)

func TestDoOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		p, c := newProvider(t)
		l := newLedger(t, d, effect.Config{})
		var calls atomic.Int64
		fn := func(ctx context.Context, key string) ([]byte, error) {
			calls.Add(1)
			return c.Send(ctx, key, []byte(`{"amount":100}`))
		}
		first, err := l.Do(ctx, "charge:1", fn)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			again, err := l.Do(ctx, "charge:1", fn)
			if err != nil || string(again) != string(first) {
				t.Fatalf("again = %s, %v", again, err)
			}
		}
		if calls.Load() != 1 || p.UniqueEffects() != 1 {
			t.Fatalf("fn calls = %d, unique = %d", calls.Load(), p.UniqueEffects())
		}
		// Do and Schedule keys do not mix.
		err = store.InTx(ctx, d, func(tx any) error {
			_, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "charge:1", Kind: "charge"})
			return err
		})
		if !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("schedule over a Do key: %v", err)
		}
		schedule(t, d, l, effect.Effect{Key: "email:1", Kind: "email"})
		if _, err := l.Do(ctx, "email:1", fn); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("Do over a scheduled key: %v", err)
		}
	})
}

func TestDoConcurrentCallersOneCall(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		var calls atomic.Int64
		release := make(chan struct{})
		fn := func(context.Context, string) ([]byte, error) {
			calls.Add(1)
			<-release
			return []byte("done"), nil
		}
		var wg sync.WaitGroup
		var inProgress, ok atomic.Int64
		for range 8 {
			wg.Go(func() {
				res, err := l.Do(context.Background(), "k", fn)
				switch {
				case errors.Is(err, idem.ErrInProgress):
					inProgress.Add(1)
				case err == nil && string(res) == "done":
					ok.Add(1)
				default:
					t.Errorf("Do: %s %v", res, err)
				}
			})
		}
		waitFor(t, "the one caller to start", func() bool { return calls.Load() == 1 })
		waitFor(t, "the others to be refused", func() bool { return inProgress.Load() == 7 })
		close(release)
		wg.Wait()
		if calls.Load() != 1 || ok.Load() != 1 {
			t.Fatalf("calls = %d, ok = %d", calls.Load(), ok.Load())
		}
	})
}

func TestDoErrors(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		l := newLedger(t, d, effect.Config{})
		var calls atomic.Int64
		transient := func(context.Context, string) ([]byte, error) { calls.Add(1); return nil, errors.New("503") }
		if _, err := l.Do(ctx, "t", transient); err == nil || idem.IsPermanent(err) {
			t.Fatalf("transient: %v", err)
		}
		if e := get(t, l, "t"); e.State != effect.Pending || e.LastError != "503" {
			t.Fatalf("after a transient error: %+v", e)
		}
		res, err := l.Do(ctx, "t", func(context.Context, string) ([]byte, error) { calls.Add(1); return []byte("ok"), nil })
		if err != nil || string(res) != "ok" || calls.Load() != 2 {
			t.Fatalf("retry after transient: %s %v", res, err)
		}

		perm := func(context.Context, string) ([]byte, error) { return nil, idem.Permanent(errors.New("card declined")) }
		if _, err := l.Do(ctx, "p", perm); !idem.IsPermanent(err) {
			t.Fatalf("permanent: %v", err)
		}
		_, err = l.Do(ctx, "p", func(context.Context, string) ([]byte, error) { t.Fatal("called a failed key"); return nil, nil })
		var fe *effect.FailedError
		if !errors.Is(err, effect.ErrFailed) || !errors.As(err, &fe) || fe.LastError == "" || !idem.IsPermanent(err) {
			t.Fatalf("failed key: %v", err)
		}
		if err := l.Retry(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if res, err := l.Do(ctx, "p", func(context.Context, string) ([]byte, error) { return []byte("paid"), nil }); err != nil || string(res) != "paid" {
			t.Fatalf("after redrive: %s %v", res, err)
		}
		if _, err := l.Do(ctx, "", transient); !errors.Is(err, idem.ErrInvalidInput) {
			t.Fatalf("empty key: %v", err)
		}
		if _, err := l.Do(ctx, "x", func(context.Context, string) ([]byte, error) { panic("boom") }); err == nil {
			t.Fatal("panic swallowed")
		}
	})
}

// A caller crashed (or hung) holding the lease: idem.Retake re-calls with the same
// key and the late zombie cannot overwrite; Hold refuses until an operator
// resolves it.
func TestDoExpiredLeasePolicies(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		p, c := newProvider(t)
		cfg := effect.Config{Lease: 500 * time.Millisecond, CallTimeout: 500 * time.Millisecond}
		l := newLedger(t, d, cfg)

		zombieIn, zombieOut := make(chan struct{}), make(chan struct{})
		zombieErr := make(chan error, 1)
		go func() {
			_, err := l.Do(ctx, "charge:z", func(ctx context.Context, key string) ([]byte, error) {
				res, err := c.Send(ctx, key, []byte("x"))
				close(zombieIn)
				<-zombieOut // stalls past its lease after the provider call
				return res, err
			})
			zombieErr <- err
		}()
		<-zombieIn
		if _, err := l.Do(ctx, "charge:z", nil); err == nil {
			t.Fatal("nil fn accepted")
		}
		_, err := l.Do(ctx, "charge:z", func(ctx context.Context, key string) ([]byte, error) { return c.Send(ctx, key, []byte("x")) })
		if !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("live lease: %v", err)
		}
		waitFor(t, "lease expiry", func() bool { return time.Now().After(get(t, l, "charge:z").LeaseUntil) })
		res, err := l.Do(ctx, "charge:z", func(ctx context.Context, key string) ([]byte, error) { return c.Send(ctx, key, []byte("x")) })
		if err != nil {
			t.Fatal(err)
		}
		close(zombieOut)
		if err := <-zombieErr; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("zombie: %v", err)
		}
		e := get(t, l, "charge:z")
		if string(e.Result) != string(res) || e.Token != 2 || p.UniqueEffects() != 1 || p.Calls() != 2 {
			t.Fatalf("effect %+v, calls=%d unique=%d", e, p.Calls(), p.UniqueEffects())
		}

		// Hold: an abandoned key needs an operator.
		hold := newLedger(t, d, effect.Config{Lease: 50 * time.Millisecond, CallTimeout: 50 * time.Millisecond, ExpiredLease: idem.Hold})
		crashIn, crashOut := make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = hold.Do(ctx, "charge:h", func(context.Context, string) ([]byte, error) {
				close(crashIn)
				<-crashOut
				return nil, errors.New("late")
			})
		}()
		<-crashIn
		waitFor(t, "lease expiry", func() bool { return time.Now().After(get(t, l, "charge:h").LeaseUntil) })
		if _, err := hold.Do(ctx, "charge:h", func(context.Context, string) ([]byte, error) { t.Error("called under Hold"); return nil, nil }); !errors.Is(err, idem.ErrNeedsReconciliation) {
			t.Fatalf("hold: %v", err)
		}
		if err := hold.Resolve(ctx, "charge:h", []byte("confirmed with the provider")); err != nil {
			t.Fatal(err)
		}
		close(crashOut)
		res, err = hold.Do(ctx, "charge:h", func(context.Context, string) ([]byte, error) { t.Error("called a resolved key"); return nil, nil })
		if err != nil || string(res) != "confirmed with the provider" {
			t.Fatalf("resolved: %s %v", res, err)
		}
	})
}

// A caller hung holding the lease of a key until it expired; N callers then
// race for the key at once, on every driver: exactly one of them takes it
// over (new token) and calls fn, every other one sees the winner's live
// lease (idem.ErrInProgress), and the hung caller, waking up, is fenced out
// (idem.ErrLeaseLost).
func TestDoExpiredLeaseTakenOverByExactlyOneRacer(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		cfg := effect.Config{Lease: time.Minute, CallTimeout: time.Minute}
		hung := newLedger(t, d, cfg)
		hungIn, hungOut := make(chan struct{}), make(chan struct{})
		hungErr := make(chan error, 1)
		go func() {
			_, err := hung.Do(ctx, "charge:race", func(context.Context, string) ([]byte, error) {
				close(hungIn)
				<-hungOut
				return []byte("zombie"), nil
			})
			hungErr <- err
		}()
		<-hungIn

		// The racers' clock is past the hung caller's lease.
		later := cfg
		later.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
		racers := newLedger(t, d, later)
		const n = 8
		var calls, inProgress, ok atomic.Int64
		release := make(chan struct{})
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				<-start
				res, err := racers.Do(ctx, "charge:race", func(context.Context, string) ([]byte, error) {
					calls.Add(1)
					<-release // hold the new lease while the others look
					return []byte("winner"), nil
				})
				switch {
				case errors.Is(err, idem.ErrInProgress):
					inProgress.Add(1)
				case err == nil && string(res) == "winner":
					ok.Add(1)
				default:
					t.Errorf("racer Do: %s %v", res, err)
				}
			})
		}
		close(start)
		// The losers can be refused before the winner, whose takeover
		// they saw committed, has called fn.
		waitFor(t, "the losers to be refused and the winner to call", func() bool { return inProgress.Load() == n-1 && calls.Load() >= 1 })
		if c := calls.Load(); c != 1 {
			t.Fatalf("fn called %d times by %d racers, want 1", c, n)
		}
		close(release)
		wg.Wait()
		if calls.Load() != 1 || ok.Load() != 1 || inProgress.Load() != n-1 {
			t.Fatalf("calls = %d, ok = %d, in progress = %d", calls.Load(), ok.Load(), inProgress.Load())
		}
		close(hungOut)
		if err := <-hungErr; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("hung caller: %v", err)
		}
		e := get(t, racers, "charge:race")
		if e.State != effect.Completed || string(e.Result) != "winner" || e.Token != 2 || e.Attempts != 2 {
			t.Fatalf("effect after the race: %+v", e)
		}
	})
}
