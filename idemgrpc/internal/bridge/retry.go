package bridge

import (
	"context"
	"time"
)

// Retries is the client interceptors' own retry policy: the same call,
// with the same key, after an answer a retry can change.
type Retries struct {
	// MaxAttempts is the most attempts; below 2, one.
	MaxAttempts int
	// Backoff is the first wait (default 50ms); it doubles up to
	// MaxBackoff (default 2s).
	Backoff, MaxBackoff time.Duration
	// Retryable reports whether err is an answer a retry can change.
	Retryable func(err error) bool
	// DelayOf is the delay err asks for (its RetryInfo), or 0.
	DelayOf func(err error) time.Duration
}

// Do runs attempt until it succeeds, its error is not retryable, the
// attempts are spent or ctx ends; it returns the last error. It waits the
// error's own delay when it has one, else the doubling backoff.
func (r Retries) Do(ctx context.Context, attempt func() error) error {
	wait := r.Backoff
	if wait <= 0 {
		wait = 50 * time.Millisecond
	}
	maxWait := r.MaxBackoff
	if maxWait <= 0 {
		maxWait = 2 * time.Second
	}
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || n >= r.MaxAttempts || !r.Retryable(err) {
			return err
		}
		d := wait
		if ra := r.DelayOf(err); ra > 0 {
			d = ra
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(wait*2, maxWait)
	}
}
