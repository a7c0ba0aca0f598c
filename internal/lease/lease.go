// Package lease is idem's one lease machine: claim a row (insert it, or
// take over one whose lease expired), fence every later write by the
// fencing token, and finalise, release or hold. The inbox's long
// operations, the effect ledger (worker and Do), two-phase HTTP keys and the
// outbox relay's claims all run on it; each keeps only its own statements.
//
// States, the one vocabulary of every leased table:
//
//	             insert                        finalise (token)
//	(absent) ─────────────► in_progress ───────────────────► completed
//	   │                      │  ▲   │
//	   │ schedule     release │  │   │ hold / fail (token)
//	   ▼                      ▼  │   ▼
//	pending ──── take over ───┘  │  failed ──── operator redrive ──► pending
//	                             │
//	          take over (lease expired, policy Retake; token+1)
//
// A row in_progress whose lease ran out is taken over under the Retake
// policy (new token; the old owner's writes then fail with
// idem.ErrLeaseLost) or reported as idem.ErrNeedsReconciliation under
// Hold.
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// The states of a leased row, stored as these strings in every table.
const (
	// Pending: waiting to be claimed (a scheduled effect, an event not yet
	// published, work released after a transient error).
	Pending = "pending"
	// InProgress: owned under a lease; the owner may be executing.
	InProgress = "in_progress"
	// Completed: finalised by the owner holding the token.
	Completed = "completed"
	// Failed: ended without success and kept for an operator: failed
	// permanently, or held for reconciliation.
	Failed = "failed"
)

// Record is what a leased row says about its lease, as read by the owner's
// feature.
type Record struct {
	State      string
	Token      int64
	LeaseUntil time.Time
	// Same is true when the row was written for the same request or
	// payload (fpmatch.Same).
	Same bool
	// Expired is true when the row outlived its retention: it is
	// reclaimed as if it were absent, whatever its state.
	Expired bool
}

// Decision is what the machine concludes from a Record.
type Decision int

const (
	// Acquire: take the row over (pending, retention expired, or an
	// expired lease under Retake).
	Acquire Decision = iota + 1
	// Done: the row is completed; replay or drop the duplicate.
	Done
	// Busy: a live lease is held by another owner (idem.ErrInProgress).
	Busy
	// Held: the lease expired under Hold (idem.ErrNeedsReconciliation).
	Held
	// Ended: the row is failed.
	Ended
	// Mismatch: the row was written for another payload
	// (idem.ErrFingerprintMismatch).
	Mismatch
)

var decisionNames = [...]string{Acquire: "acquire", Done: "done", Busy: "busy", Held: "held", Ended: "ended", Mismatch: "mismatch"}

// String returns the decision's name.
func (d Decision) String() string {
	if d > 0 && int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Decide is the machine's one transition table.
func Decide(r Record, now time.Time, policy idem.ExpiredLease) Decision {
	if r.Expired {
		return Acquire
	}
	if !r.Same {
		return Mismatch
	}
	switch r.State {
	case Completed:
		return Done
	case Failed:
		return Ended
	case Pending:
		return Acquire
	}
	if r.LeaseUntil.After(now) {
		return Busy
	}
	if policy == idem.Hold {
		return Held
	}
	return Acquire
}

// Ops are one table's statements, run by [Claim]. R is the feature's own
// row type.
type Ops[R any] struct {
	// Insert tries to create the row in_progress with token 1 (through the
	// primary key, ON CONFLICT DO NOTHING). inserted=false: a row exists.
	Insert func(ctx context.Context, now time.Time) (row R, inserted bool, err error)
	// Read reads the existing row. found=false: it vanished meanwhile
	// (expiry), and Claim inserts again.
	Read func(ctx context.Context, now time.Time) (row R, rec Record, found bool, err error)
	// TakeOver moves the row observed as rec to a new lease (token+1),
	// fenced on rec.Token. ok=false: another owner moved first, and Claim
	// looks again.
	TakeOver func(ctx context.Context, rec Record, now time.Time) (row R, ok bool, err error)
}

// Claim is the outcome of [Run].
type Claim[R any] struct {
	Row      R
	Decision Decision
	// Inserted is true for a new row, TookOver for a row taken over
	// (Decision is Acquire for both).
	Inserted, TookOver bool
	// Record is the row as read when the decision was not Acquire-by-insert.
	Record Record
}

// ErrContention is returned (wrapping idem.ErrInProgress) when the row kept
// changing under Run for all its tries.
var ErrContention = fmt.Errorf("lease: the record kept changing: %w", idem.ErrInProgress)

// Run claims one row: insert it, or read it and apply [Decide], taking it
// over when the decision is Acquire. now is read once per try. It returns
// the decision with the row; only an Acquire leaves the caller owning the
// lease.
func Run[R any](ctx context.Context, ops Ops[R], policy idem.ExpiredLease, now func() time.Time, tries int) (Claim[R], error) {
	if tries <= 0 {
		tries = 5
	}
	for range tries {
		t := now()
		row, inserted, err := ops.Insert(ctx, t)
		if err != nil {
			return Claim[R]{}, err
		}
		if inserted {
			return Claim[R]{Row: row, Decision: Acquire, Inserted: true}, nil
		}
		row, rec, found, err := ops.Read(ctx, t)
		if err != nil {
			return Claim[R]{}, err
		}
		if !found {
			continue
		}
		d := Decide(rec, t, policy)
		if d != Acquire {
			return Claim[R]{Row: row, Decision: d, Record: rec}, nil
		}
		row, ok, err := ops.TakeOver(ctx, rec, t)
		if err != nil {
			return Claim[R]{}, err
		}
		if ok {
			return Claim[R]{Row: row, Decision: Acquire, TookOver: true, Record: rec}, nil
		}
	}
	return Claim[R]{}, ErrContention
}

// Fence turns the result of a write fenced by a token (… WHERE token = $n)
// into an error: err itself, or idem.ErrLeaseLost when no row matched
// (another owner took the lease over, or it was finalised already). what
// names the work in the message.
func Fence(n int64, err error, what string, token int64) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s token %d: %w", what, token, idem.ErrLeaseLost)
	}
	return nil
}

// Lost reports whether err says the lease was lost.
func Lost(err error) bool { return errors.Is(err, idem.ErrLeaseLost) }
