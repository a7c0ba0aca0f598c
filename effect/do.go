package effect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// CallFunc is an inline external call guarded by [Ledger.Do]. key is the
// effect key; pass it to the provider as its idempotency key.
type CallFunc func(ctx context.Context, key string) ([]byte, error)

// Do performs the call fn once in effect for key, two-phase with a lease:
//
//  1. an in_progress record with a lease and a fencing token is committed
//     (or an existing record is inspected);
//  2. fn(ctx, key) runs outside any transaction, bounded by CallTimeout;
//  3. its result is recorded as completed only if the token still matches.
//
// Outcomes by the state found for key:
//
//   - completed: the stored result is returned; fn is not called.
//   - in_progress under a live lease (another caller is running it):
//     an error wrapping [idem.ErrInProgress]; retry later.
//   - in_progress with an expired lease (the earlier caller crashed or
//     hung): per [Config.ExpiredLease], ReCall takes it over and calls fn
//     again with the same key (default), Hold returns
//     [idem.ErrNeedsReconciliation].
//   - pending (an earlier call failed transiently): fn is called again.
//   - failed (an earlier call failed permanently): a permanent error
//     wrapping [ErrFailed]; [Ledger.Retry] redrives it.
//
// If fn fails with a permanent error ([idem.IsPermanent]) the effect becomes
// failed and the error is returned; any other error releases the key to
// pending and is returned, so a later Do retries. If the lease was taken
// over while fn ran (the caller became a zombie), nothing is written and an
// error wrapping [idem.ErrLeaseLost] is returned; the result of the owner
// that took over stands.
//
// Crash: a crash after fn reached the provider and before step 3 leaves the
// key in_progress; once the lease runs out the next Do re-calls with the
// same key (or holds), so the provider must honour idempotency keys.
//
// A key used with Do cannot be scheduled, and vice versa
// ([idem.ErrFingerprintMismatch]).
func (l *Ledger[TTx]) Do(ctx context.Context, key string, fn CallFunc) ([]byte, error) {
	if err := idem.ValidateID(key); err != nil {
		return nil, fmt.Errorf("effect: key: %w", err)
	}
	if fn == nil {
		return nil, idem.InvalidOptionf("effect: nil fn")
	}
	pool := l.d.Pool()
	for range 20 {
		now := l.now()
		lease := store.Micros(now.Add(l.cfg.Lease))
		// Fast path for the common replay: a plain read. It decides nothing
		// by itself; a missing row goes through the insert below, where the
		// primary key decides.
		e, err := scanEffect(pool.QueryRow(ctx, l.q.get, key))
		if errors.Is(err, store.ErrNoRows) {
			e, err = scanEffect(pool.QueryRow(ctx, l.q.inline, key, inlineFingerprint, lease, store.Micros(now), []byte{}))
			if err == nil {
				return l.run(ctx, e, fn)
			}
			if !errors.Is(err, store.ErrNoRows) {
				return nil, fmt.Errorf("effect: do %q: %w", key, err)
			}
			e, err = scanEffect(pool.QueryRow(ctx, l.q.get, key))
			if errors.Is(err, store.ErrNoRows) {
				continue // deleted in between: insert again
			}
		}
		if err != nil {
			return nil, fmt.Errorf("effect: do %q: %w", key, err)
		}
		if !bytes.Equal(e.fingerprint, inlineFingerprint) {
			return nil, mismatch(key, e.fingerprint, inlineFingerprint)
		}
		switch e.State {
		case Completed:
			return e.Result, nil
		case Failed:
			return nil, idem.Permanent(&FailedError{Key: key, LastError: e.LastError})
		case InProgress:
			if e.LeaseUntil.After(now) {
				return nil, fmt.Errorf("effect %q is in progress until %s: %w", key, e.LeaseUntil.Format(time.RFC3339Nano), idem.ErrInProgress)
			}
			if l.cfg.ExpiredLease == Hold {
				return nil, fmt.Errorf("effect %q: lease expired at %s, outcome unknown: %w", key, e.LeaseUntil.Format(time.RFC3339Nano), idem.ErrNeedsReconciliation)
			}
		}
		// pending, or in_progress abandoned under ReCall: take it over with a
		// compare-and-set on the observed token.
		got, err := scanEffect(pool.QueryRow(ctx, l.q.takeOver, key, e.Token, lease, store.Micros(now)))
		if errors.Is(err, store.ErrNoRows) {
			continue // someone else moved first; look again
		}
		if err != nil {
			return nil, fmt.Errorf("effect: do %q: %w", key, err)
		}
		if got.State == InProgress && e.State == InProgress {
			l.log.WarnContext(ctx, "re-calling an abandoned effect with the same key", "key", key, "token", got.Token)
		}
		return l.run(ctx, got, fn)
	}
	return nil, fmt.Errorf("effect: do %q: too much contention: %w", key, idem.ErrInProgress)
}

// run calls fn for the claimed effect e and finalises under its token.
func (l *Ledger[TTx]) run(ctx context.Context, e Effect, fn CallFunc) ([]byte, error) {
	ctx, span := l.startCall(ctx, e)
	cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	res, err := callSafely(func() ([]byte, error) { return fn(cctx, e.Key) })
	cancel()
	switch {
	case err == nil:
		endCall(span, outcomeCompleted, nil)
	case idem.IsPermanent(err):
		endCall(span, outcomeFailed, err)
	default:
		endCall(span, outcomeRetry, err)
	}
	// Record the outcome even if the caller's ctx ended meanwhile: the call
	// happened, and forgetting it would only cause another call.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	switch {
	case err == nil:
		if cerr := l.complete(fctx, e.Key, e.Token, res); cerr != nil {
			return nil, cerr
		}
		return res, nil
	case idem.IsPermanent(err):
		if _, ferr := l.fail(fctx, e.Key, e.Token, err, nil); ferr != nil {
			return nil, errors.Join(err, ferr)
		}
		return nil, err
	default:
		if rerr := l.release(fctx, e.Key, e.Token, l.now(), err, false); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	}
}
