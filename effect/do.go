package effect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/lease"
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
//     hung): per [Config.ExpiredLease], idem.Retake takes it over and
//     calls fn again with the same key (default), idem.Hold returns
//     [idem.ErrNeedsReconciliation]. Of many callers racing for one
//     expired key, exactly one takes it over (the take-over is fenced on
//     the token read); the others see its live lease.
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
	if err := checks.ID(key); err != nil {
		return nil, fmt.Errorf("effect: key: %w", err)
	}
	if fn == nil {
		return nil, checks.Optionf("effect: nil fn")
	}
	c, err := lease.Run(ctx, l.doOps(key), l.cfg.ExpiredLease, l.now, 20)
	if err != nil {
		return nil, fmt.Errorf("effect: do %q: %w", key, err)
	}
	e := c.Row
	switch c.Decision {
	case lease.Acquire:
		if c.TookOver && c.Record.State == lease.InProgress {
			l.log.WarnContext(ctx, "re-calling an abandoned effect with the same key", "effect_key", key, "token", e.Token)
		}
		return l.run(ctx, e, fn)
	case lease.Done:
		return e.Result, nil
	case lease.Ended:
		return nil, idem.Permanent(&FailedError{Key: key, LastError: e.LastError})
	case lease.Busy:
		return nil, fmt.Errorf("effect %q is in progress until %s: %w", key, e.LeaseUntil.Format(time.RFC3339Nano), idem.ErrInProgress)
	case lease.Held:
		return nil, fmt.Errorf("effect %q: lease expired at %s, outcome unknown: %w", key, e.LeaseUntil.Format(time.RFC3339Nano), idem.ErrNeedsReconciliation)
	case lease.Mismatch:
		return nil, checkFingerprint(e, inlineFingerprint)
	}
	return nil, fmt.Errorf("effect: do %q: unexpected lease decision %s", key, c.Decision)
}

// doOps are Do's statements for the lease machine. The first Insert looks
// before it inserts: the common call of Do is the replay of a completed
// key, answered by that one read (which Read then hands over without a
// second one); a missing row goes on to the INSERT, where the primary key
// decides. A fresh key costs a read and an insert, as a replay costs one
// read.
func (l *Ledger[TTx]) doOps(key string) lease.Ops[Effect] {
	pool := l.d.Pool()
	looked := false
	var seen *Effect // read by the first Insert, not yet handed to Read
	get := func(ctx context.Context) (Effect, lease.Record, bool, error) {
		e, err := scanEffect(pool.QueryRow(ctx, l.q.Get, key))
		if errors.Is(err, store.ErrNoRows) {
			return Effect{}, lease.Record{}, false, nil
		}
		if err != nil {
			return Effect{}, lease.Record{}, false, err
		}
		return e, record(e, inlineFingerprint), true, nil
	}
	return lease.Ops[Effect]{
		Insert: func(ctx context.Context, now time.Time) (Effect, bool, error) {
			if !looked {
				looked = true
				e, _, found, err := get(ctx)
				if err != nil {
					return Effect{}, false, err
				}
				if found {
					seen = &e
					return Effect{}, false, nil
				}
			}
			e, err := scanEffect(pool.QueryRow(ctx, l.q.Insert, key, inlineFingerprint.Bytes(),
				store.Micros(now.Add(l.cfg.Lease)), store.Micros(now), []byte{}))
			if errors.Is(err, store.ErrNoRows) {
				return Effect{}, false, nil // a row exists
			}
			return e, err == nil, err
		},
		Read: func(ctx context.Context, _ time.Time) (Effect, lease.Record, bool, error) {
			if seen != nil {
				e := *seen
				seen = nil
				return e, record(e, inlineFingerprint), true, nil
			}
			return get(ctx)
		},
		TakeOver: func(ctx context.Context, rec lease.Record, now time.Time) (Effect, bool, error) {
			e, err := scanEffect(pool.QueryRow(ctx, l.q.TakeOver, key, rec.Token, store.Micros(now.Add(l.cfg.Lease)), store.Micros(now)))
			if errors.Is(err, store.ErrNoRows) {
				return Effect{}, false, nil // another owner moved first
			}
			return e, err == nil, err
		},
	}
}

// record is what the effect e says about its lease, for fp.
func record(e Effect, fp idem.Fingerprint) lease.Record {
	return lease.Record{State: string(e.State), Token: e.Token, LeaseUntil: e.LeaseUntil,
		Same: fpmatch.Same(e.fingerprint, fp)}
}

// run calls fn for the claimed effect e and finalises under its token.
func (l *Ledger[TTx]) run(ctx context.Context, e Effect, fn CallFunc) ([]byte, error) {
	ctx, span := startCall(ctx, l.tr, e)
	cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	res, err := callSafely(ctx, l.log, e.Key, func() ([]byte, error) { return fn(cctx, e.Key) })
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
