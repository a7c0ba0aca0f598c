package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Lease is a claim on one message for an operation too long to run inside
// one transaction. It is committed as a 'processing' record when Claim
// returns; the owner finalises it with CompleteTx, or Release/Fail.
//
// If the owner crashes, the record stays 'processing' until Until; after
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

// Claim records msg for consumer as 'processing' under a lease (Config.Lease
// when lease is 0), committed at once outside any caller transaction.
//
//   - New message: a Lease with Token 1.
//   - Completed record, same payload: idem.ErrDuplicate (do not run again).
//   - Live lease held by another owner: idem.ErrInProgress.
//   - Lease expired (owner crashed): taken over; Lease.Recovered is true.
//   - Record marked failed by Fail: idem.ErrNeedsReconciliation.
//   - Different payload: idem.ErrFingerprintMismatch.
func (in *Inbox[TTx]) Claim(ctx context.Context, consumer string, msg idem.Message, lease time.Duration) (*Lease, error) {
	if err := validate(consumer, msg); err != nil {
		return nil, err
	}
	if lease <= 0 {
		lease = in.cfg.Lease
	}
	q := in.d.Pool()
	fp := msg.Fingerprint()
	for attempt := 0; attempt < 5; attempt++ {
		now := in.cfg.Now()
		until := now.Add(lease)
		n, err := q.Exec(ctx, in.q.claim, consumer, msg.ID, fp[:], store.Micros(until), store.Micros(now), store.Micros(now.Add(in.retention(consumer))))
		if err != nil {
			return nil, fmt.Errorf("inbox: claim %s/%s: %w", consumer, msg.ID, err)
		}
		if n == 1 {
			return &Lease{Consumer: consumer, MessageID: msg.ID, Token: 1, Attempt: 1, Until: until}, nil
		}
		rec, err := in.read(ctx, q, consumer, msg.ID)
		if errors.Is(err, store.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !fingerprintEqual(rec.fingerprint, fp) {
			return nil, rec.check(consumer, msg.ID, fp)
		}
		if rec.state == "processing" && rec.leaseUntil <= store.Micros(now) {
			// Abandoned: take over, fenced on the token we read, so two
			// recoverers cannot both win.
			var token int64
			var attempts int
			err := q.QueryRow(ctx, in.q.takeover, consumer, msg.ID, rec.token, store.Micros(until), store.Micros(now)).Scan(&token, &attempts)
			if errors.Is(err, store.ErrNoRows) {
				continue // someone else took over or finished first; look again
			}
			if err != nil {
				return nil, fmt.Errorf("inbox: take over %s/%s: %w", consumer, msg.ID, err)
			}
			in.log.InfoContext(ctx, "abandoned claim recovered", "consumer", consumer, "message_id", msg.ID, "token", token)
			return &Lease{Consumer: consumer, MessageID: msg.ID, Token: token, Attempt: attempts, Until: until, Recovered: true}, nil
		}
		if err := rec.check(consumer, msg.ID, fp); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("inbox: %s/%s: %w", consumer, msg.ID, idem.ErrDuplicate)
	}
	return nil, fmt.Errorf("inbox: claim %s/%s: record kept changing: %w", consumer, msg.ID, idem.ErrInProgress)
}

func fingerprintEqual(b []byte, fp idem.Fingerprint) bool {
	f, err := idem.FingerprintFromBytes(b)
	return err == nil && f == fp
}

// fenced runs a statement guarded by the lease's token and maps "no row" to
// idem.ErrLeaseLost.
func (in *Inbox[TTx]) fenced(ctx context.Context, q store.Querier, stmt string, l *Lease, arg int64) error {
	n, err := q.Exec(ctx, stmt, l.Consumer, l.MessageID, l.Token, arg)
	if err != nil {
		return fmt.Errorf("inbox: %s/%s: %w", l.Consumer, l.MessageID, err)
	}
	if n == 0 {
		return fmt.Errorf("inbox: %s/%s token %d: %w", l.Consumer, l.MessageID, l.Token, idem.ErrLeaseLost)
	}
	return nil
}

// CompleteTx marks the claimed message completed inside tx, together with
// the effect the caller writes in tx. It fails with idem.ErrLeaseLost (and
// the caller must roll back) when the lease was taken over.
func (in *Inbox[TTx]) CompleteTx(ctx context.Context, tx TTx, l *Lease) error {
	return in.fenced(ctx, in.d.Tx(tx), in.q.complete, l, store.Micros(in.cfg.Now()))
}

// Extend moves the lease's end to now+d, fenced by the token.
func (in *Inbox[TTx]) Extend(ctx context.Context, l *Lease, d time.Duration) error {
	until := in.cfg.Now().Add(d)
	if err := in.fenced(ctx, in.d.Pool(), in.q.extend, l, store.Micros(until)); err != nil {
		return err
	}
	l.Until = until
	return nil
}

// Release deletes the claim so the next delivery processes the message from
// scratch (after a transient failure). Fenced by the token.
func (in *Inbox[TTx]) Release(ctx context.Context, l *Lease) error {
	n, err := in.d.Pool().Exec(ctx, in.q.release, l.Consumer, l.MessageID, l.Token)
	if err != nil {
		return fmt.Errorf("inbox: release %s/%s: %w", l.Consumer, l.MessageID, err)
	}
	if n == 0 {
		return fmt.Errorf("inbox: %s/%s token %d: %w", l.Consumer, l.MessageID, l.Token, idem.ErrLeaseLost)
	}
	return nil
}

// Fail marks the claim failed: later deliveries get
// idem.ErrNeedsReconciliation until an operator deletes the record.
func (in *Inbox[TTx]) Fail(ctx context.Context, l *Lease) error {
	return in.fenced(ctx, in.d.Pool(), in.q.fail, l, store.Micros(in.cfg.Now()))
}

// Abandoned describes a 'processing' record whose lease has expired.
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
	rows, err := in.d.Pool().Query(ctx, in.q.abandoned, consumer, store.Micros(in.cfg.Now()), limit)
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
