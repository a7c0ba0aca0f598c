package idem

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// ExpiredLease says what idem does when it finds work whose lease ran out:
// its owner crashed or hung, and whether the side effect happened is
// unknown. The inbox's long operations, the effect ledger and two-phase
// HTTP keys share this one policy type.
type ExpiredLease int

const (
	// Retake takes the work over under a new fencing token and runs it
	// again (with the same idempotency key, for a provider call). Any write
	// by the old owner then fails with ErrLeaseLost. The default.
	Retake ExpiredLease = iota
	// Hold leaves the work to an operator: the caller gets
	// ErrNeedsReconciliation until someone resolves it.
	Hold
)

// String returns "retake" or "hold".
func (p ExpiredLease) String() string {
	switch p {
	case Retake:
		return "retake"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("ExpiredLease(%d)", int(p))
}

// Valid reports whether p is Retake or Hold.
func (p ExpiredLease) Valid() bool { return p == Retake || p == Hold }

// Backoff is exponential backoff with full jitter, the one retry delay of
// idem (consumer redeliveries, effect attempts, relay publishes): the delay
// before retry n (n ≥ 1, the attempt that failed) is uniformly random in
// [0, min(Max, Base·2^(n-1))].
type Backoff struct {
	// Base is the first retry's upper bound.
	Base time.Duration
	// Max caps every delay.
	Max time.Duration
}

// Ceil returns the upper bound of the delay before retry n.
func (b Backoff) Ceil(n int) time.Duration {
	ceil := b.Base
	for i := 1; i < n && ceil < b.Max; i++ {
		if ceil > b.Max/2 {
			ceil = b.Max // doubling would pass Max (or overflow)
			break
		}
		ceil *= 2
	}
	return max(0, min(ceil, b.Max))
}

// Delay returns a delay before retry n, drawn with rnd (a float in [0, 1));
// nil uses math/rand/v2.
func (b Backoff) Delay(n int, rnd func() float64) time.Duration {
	if rnd == nil {
		rnd = rand.Float64
	}
	return time.Duration(rnd() * float64(b.Ceil(n)))
}
