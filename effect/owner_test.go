package effect_test

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testclock"
	"github.com/idemkit/idem/store"
)

// CountsByKind counts every state per kind (inline effects under the empty
// kind); CountAbandoned counts the in_progress effects whose lease ended by
// the time asked, and no longer once they settle.
func TestCountsByKindAndAbandoned(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		t0 := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
		clock := testclock.New(t0)
		l := newLedger(t, d, effect.Config{Now: clock.Now, Lease: time.Minute})
		schedule(t, d, l, effect.Effect{Key: "mail:1", Kind: "email"}, effect.Effect{Key: "mail:2", Kind: "email"},
			effect.Effect{Key: "text:1", Kind: "sms"})
		if _, err := l.Do(ctx, "inline", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }); err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"email": 2, "sms": 1, "": 1}
		if got, err := operator.EffectCountsByKind(ctx, d); err != nil || !maps.Equal(got, want) {
			t.Fatalf("CountsByKind = %v, %v; want %v", got, err, want)
		}
		if n, err := operator.EffectCountAbandoned(ctx, d, t0.Add(time.Hour)); err != nil || n != 0 {
			t.Fatalf("CountAbandoned with nothing in progress = %d, %v", n, err)
		}
		_, err := l.Do(ctx, "stuck", func(context.Context, string) ([]byte, error) {
			// In progress under a one-minute lease claimed at t0.
			if n, err := operator.EffectCountAbandoned(ctx, d, t0.Add(30*time.Second)); err != nil || n != 0 {
				t.Errorf("CountAbandoned within the lease = %d, %v; want 0", n, err)
			}
			if n, err := operator.EffectCountAbandoned(ctx, d, t0.Add(time.Minute)); err != nil || n != 1 {
				t.Errorf("CountAbandoned at the lease's end = %d, %v; want 1", n, err)
			}
			return []byte("ok"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := operator.EffectCountAbandoned(ctx, d, t0.Add(time.Hour)); err != nil || n != 0 {
			t.Fatalf("CountAbandoned after the call completed = %d, %v", n, err)
		}
		// Pending and completed alike count under their kind.
		schedule(t, d, l, effect.Effect{Key: "text:2", Kind: "sms"})
		want = map[string]int64{"email": 2, "sms": 2, "": 2}
		if got, err := operator.EffectCountsByKind(ctx, d); err != nil || !maps.Equal(got, want) {
			t.Fatalf("CountsByKind = %v, %v; want %v", got, err, want)
		}
	})
}

// Token reads the claim's fencing token while the effect is in progress;
// FenceTx passes under that token only, in the caller's transaction, and
// fails with ErrLeaseLost once another claimer took the effect over or it
// settled; LockTx reads the state (found false for an unknown key).
func TestTokenFenceAndLock(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		clock := testclock.New(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
		l := newLedger(t, d, effect.Config{Now: clock.Now, Lease: time.Minute})
		fence := func(key string, token int64) error {
			return store.InTx(ctx, d, func(tx any) error { return effect.FenceTx(ctx, d, tx, key, token) })
		}
		lock := func(key string) (st effect.State, found bool) {
			t.Helper()
			err := store.InTx(ctx, d, func(tx any) error {
				var err error
				st, found, err = effect.LockTx(ctx, d, tx, key)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return st, found
		}
		var ran atomic.Int32
		_, err := l.Do(ctx, "charge", func(context.Context, string) ([]byte, error) {
			if tok, found, err := effect.Token(ctx, d, "charge"); err != nil || !found || tok != 1 {
				t.Errorf("Token of the first claim = %d, %v, %v; want 1", tok, found, err)
			}
			if st, found := lock("charge"); !found || st != effect.InProgress {
				t.Errorf("LockTx in progress = %q, %v", st, found)
			}
			if err := fence("charge", 1); err != nil {
				t.Errorf("FenceTx under the claim's token: %v", err)
			}
			if err := fence("charge", 2); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("FenceTx under another token: %v; want ErrLeaseLost", err)
			}
			// The lease ends; a second caller takes the effect over.
			clock.Advance(2 * time.Minute)
			_, err := l.Do(ctx, "charge", func(context.Context, string) ([]byte, error) {
				ran.Add(1)
				if tok, found, err := effect.Token(ctx, d, "charge"); err != nil || !found || tok != 2 {
					t.Errorf("Token after the take-over = %d, %v, %v; want 2", tok, found, err)
				}
				if err := fence("charge", 1); !errors.Is(err, idem.ErrLeaseLost) {
					t.Errorf("FenceTx under the zombie's token: %v; want ErrLeaseLost", err)
				}
				if err := fence("charge", 2); err != nil {
					t.Errorf("FenceTx under the new token: %v", err)
				}
				return []byte("second"), nil
			})
			if err != nil {
				t.Errorf("take-over Do: %v", err)
			}
			return []byte("first"), nil
		})
		if !errors.Is(err, idem.ErrLeaseLost) || ran.Load() != 1 {
			t.Fatalf("zombie Do = %v (take-over ran %d times); want ErrLeaseLost", err, ran.Load())
		}
		if st, found := lock("charge"); !found || st != effect.Completed {
			t.Fatalf("LockTx completed = %q, %v", st, found)
		}
		if err := fence("charge", 2); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("FenceTx on a completed effect: %v; want ErrLeaseLost", err)
		}
		if tok, found, err := effect.Token(ctx, d, "charge"); err != nil || found {
			t.Fatalf("Token of a completed effect = %d, %v, %v; want not found", tok, found, err)
		}
		if st, found := lock("missing"); found || st != "" {
			t.Fatalf("LockTx of an unknown key = %q, %v", st, found)
		}
		if tok, found, err := effect.Token(ctx, d, "missing"); err != nil || found {
			t.Fatalf("Token of an unknown key = %d, %v, %v", tok, found, err)
		}
	})
}

// LockTx holds the effect's row until the caller's transaction ends: a
// fence (and so the saga step it guards) in another transaction waits for
// the commit.
func TestLockTxHoldsUntilCommit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "held-row", Kind: "email"})
		locked, release := make(chan struct{}), make(chan struct{})
		var committed atomic.Bool
		lockErr := make(chan error, 1)
		go func() {
			lockErr <- store.InTx(ctx, d, func(tx any) error {
				if st, found, err := effect.LockTx(ctx, d, tx, "held-row"); err != nil || !found || st != effect.Pending {
					close(locked)
					return errors.Join(err, errors.New("LockTx: not the pending row"))
				}
				close(locked)
				<-release
				committed.Store(true)
				return nil
			})
		}()
		<-locked
		fenced := make(chan error, 1)
		go func() {
			fenced <- store.InTx(ctx, d, func(tx any) error {
				_, _, err := effect.LockTx(ctx, d, tx, "held-row")
				if err == nil && !committed.Load() {
					err = errors.New("second lock taken before the first transaction committed")
				}
				return err
			})
		}()
		select {
		case err := <-fenced:
			t.Fatalf("second transaction did not wait for the lock: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
		if err := <-lockErr; err != nil {
			t.Fatal(err)
		}
		if err := <-fenced; err != nil {
			t.Fatal(err)
		}
	})
}
