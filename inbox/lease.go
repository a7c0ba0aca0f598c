package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/store"
)

// Lease is a claim on one message for an operation too long to run inside
// one transaction. It is committed as an in_progress record when Claim
// returns; the owner finalises it with CompleteTx, or Release/Fail.
//
// If the owner crashes, the record stays in_progress until Until; after
// that, the next Claim of the same message takes it over with a new fencing
// Token, and any write by the old owner fails with idem.ErrLeaseLost.
type Lease struct {
	Consumer  string
	MessageID string
	Token     int64     // fencing token; grows by one on every takeover
	Attempt   int       // 1 for the first claim, +1 per takeover
	Until     time.Time // the lease's end
	Recovered bool      // true when this claim took over an abandoned one
}

// Claim records msg for consumer as in_progress under a lease of d
// (Config.Lease when d is 0), committed at once outside any caller transaction. It
// runs on the one lease machine (internal/lease) with the Retake policy.
//
//   - New message: a Lease with Token 1.
//   - Completed record, same payload: idem.ErrDuplicate (do not run again).
//   - Live lease held by another owner: idem.ErrInProgress.
//   - Lease expired (owner crashed): taken over; Lease.Recovered is true.
//     Of concurrent Claims of one abandoned record exactly one takes it
//     over; the others get idem.ErrInProgress.
//   - Record marked failed by Fail: idem.ErrNeedsReconciliation.
//   - Different payload: idem.ErrFingerprintMismatch.
//   - A dead-letter redrive or revision for another consumer (its
//     broker.HeaderRedriveFor names another than consumer):
//     idem.ErrDuplicate, with nothing recorded.
func (in *Inbox[TTx]) Claim(ctx context.Context, consumer string, msg idem.Message, d time.Duration) (*Lease, error) {
	if err := validConsumer(consumer); err != nil {
		return nil, err
	}
	if in.forOther(ctx, consumer, msg) {
		return nil, fmt.Errorf("inbox: %s/%s: redrive for consumer %q: %w", consumer, msg.ID, msg.Headers[broker.HeaderRedriveFor], idem.ErrDuplicate)
	}
	if err := validate(consumer, msg); err != nil {
		return nil, err
	}
	if d <= 0 {
		d = in.cfg.Lease
	}
	q := in.d.Pool()
	fp := msg.Fingerprint()
	var stored []byte // the fingerprint of the record Read found
	ops := lease.Ops[*Lease]{
		Insert: func(ctx context.Context, now time.Time) (*Lease, bool, error) {
			until := now.Add(d)
			n, err := q.Exec(ctx, in.q.Claim, consumer, msg.ID, fp[:], store.Micros(until), store.Micros(now), store.Micros(now.Add(in.retention(consumer))))
			if err != nil || n != 1 {
				return nil, false, err
			}
			return &Lease{Consumer: consumer, MessageID: msg.ID, Token: 1, Attempt: 1, Until: until}, true, nil
		},
		Read: func(ctx context.Context, now time.Time) (*Lease, lease.Record, bool, error) {
			r, err := in.read(ctx, q, consumer, msg.ID)
			if errors.Is(err, store.ErrNoRows) {
				return nil, lease.Record{}, false, nil
			}
			if err != nil {
				return nil, lease.Record{}, false, err
			}
			stored = r.fingerprint
			return nil, lease.Record{State: r.state, Token: r.token, LeaseUntil: store.FromMicros(r.leaseUntil),
				Same: fpmatch.Same(r.fingerprint, fp)}, true, nil
		},
		TakeOver: func(ctx context.Context, rec lease.Record, now time.Time) (*Lease, bool, error) {
			// Fenced on the token read, so two recoverers cannot both win.
			until := now.Add(d)
			l := &Lease{Consumer: consumer, MessageID: msg.ID, Until: until, Recovered: true}
			err := q.QueryRow(ctx, in.q.TakeOver, consumer, msg.ID, rec.Token, store.Micros(until), store.Micros(now)).Scan(&l.Token, &l.Attempt)
			if errors.Is(err, store.ErrNoRows) {
				return nil, false, nil // someone else took over or finished first; look again
			}
			if err != nil {
				return nil, false, fmt.Errorf("take over: %w", err)
			}
			return l, true, nil
		},
	}
	c, err := lease.Run(ctx, ops, idem.Retake, in.cfg.Now, 5)
	if err != nil {
		return nil, fmt.Errorf("inbox: claim %s/%s: %w", consumer, msg.ID, err)
	}
	switch c.Decision {
	case lease.Acquire:
		if c.TookOver {
			in.log.InfoContext(ctx, "abandoned claim recovered", "consumer", consumer, "message_id", msg.ID, "token", c.Row.Token)
		}
		return c.Row, nil
	case lease.Mismatch:
		return nil, fpmatch.Check(consumer+"/"+msg.ID, stored, fp)
	case lease.Done:
		return nil, fmt.Errorf("inbox: %s/%s: %w", consumer, msg.ID, idem.ErrDuplicate)
	case lease.Ended:
		return nil, fmt.Errorf("inbox: %s/%s: %w", consumer, msg.ID, idem.ErrNeedsReconciliation)
	default: // lease.Busy
		return nil, fmt.Errorf("inbox: %s/%s: %w", consumer, msg.ID, idem.ErrInProgress)
	}
}

// fenced runs a statement guarded by the lease's token (its arguments:
// consumer, message id, token, then args) and maps "no row" to
// idem.ErrLeaseLost.
func (in *Inbox[TTx]) fenced(ctx context.Context, q store.Querier, stmt string, l *Lease, args ...any) error {
	n, err := q.Exec(ctx, stmt, append([]any{l.Consumer, l.MessageID, l.Token}, args...)...)
	return lease.Fence(n, err, "inbox: "+l.Consumer+"/"+l.MessageID, l.Token)
}

// CompleteTx marks the claimed message completed inside tx, together with
// the effect the caller writes in tx. It fails with idem.ErrLeaseLost (and
// the caller must roll back) when the lease was taken over.
func (in *Inbox[TTx]) CompleteTx(ctx context.Context, tx TTx, l *Lease) error {
	return in.fenced(ctx, in.d.Tx(tx), in.q.Complete, l, store.Micros(in.cfg.Now()))
}

// Extend moves the lease's end to now+d, fenced by the token.
func (in *Inbox[TTx]) Extend(ctx context.Context, l *Lease, d time.Duration) error {
	until := in.cfg.Now().Add(d)
	if err := in.fenced(ctx, in.d.Pool(), in.q.Extend, l, store.Micros(until)); err != nil {
		return err
	}
	l.Until = until
	return nil
}

// Release deletes the claim so the next delivery processes the message from
// scratch (after a transient failure). Fenced by the token.
func (in *Inbox[TTx]) Release(ctx context.Context, l *Lease) error {
	return in.fenced(ctx, in.d.Pool(), in.q.Release, l)
}

// Fail marks the claim failed: later deliveries get
// idem.ErrNeedsReconciliation until an operator deletes the record.
func (in *Inbox[TTx]) Fail(ctx context.Context, l *Lease) error {
	return in.fenced(ctx, in.d.Pool(), in.q.Fail, l, store.Micros(in.cfg.Now()))
}

// Abandoned describes an in_progress record whose lease has expired.
type Abandoned struct {
	MessageID  string
	Token      int64
	Attempts   int
	LeaseUntil time.Time
	ReceivedAt time.Time
}

// Abandoned lists up to limit claims of consumer whose lease expired, oldest
// first, for a recovery loop that re-drives them (Claim takes them over).
func (in *Inbox[TTx]) Abandoned(ctx context.Context, consumer string, limit int) ([]Abandoned, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := in.d.Pool().Query(ctx, in.q.Abandoned, consumer, store.Micros(in.cfg.Now()), limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: abandoned: %w", err)
	}
	defer rows.Close()
	var out []Abandoned
	for rows.Next() {
		var a Abandoned
		var lu, ra int64
		if err := rows.Scan(&a.MessageID, &a.Token, &a.Attempts, &lu, &ra); err != nil {
			return nil, err
		}
		a.LeaseUntil, a.ReceivedAt = store.FromMicros(lu), store.FromMicros(ra)
		out = append(out, a)
	}
	return out, rows.Err()
}
