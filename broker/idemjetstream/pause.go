package idemjetstream

import (
	"context"
	"time"

	"github.com/idemkit/idem/broker"
)

var _ broker.Pauser = (*Subscriber)(nil)

// Pause stops pulling: until Resume, Fetch sends no pull request and
// returns no deliveries (after maxWait, or ctx's error). A pull consumer
// only receives what it asks for, so the messages wait in the stream;
// deliveries already fetched can still be settled. Other subscribers of
// the same durable consumer are not paused (the server-side consumer pause
// of NATS 2.11 would pause them all).
func (s *Subscriber) Pause(ctx context.Context) error { return s.setPaused(ctx, true) }

// Resume pulls again after Pause.
func (s *Subscriber) Resume(ctx context.Context) error { return s.setPaused(ctx, false) }

// Paused reports whether the subscriber is paused.
func (s *Subscriber) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

func (s *Subscriber) setPaused(ctx context.Context, p bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return broker.ErrClosed
	}
	s.paused = p
	return nil
}

// pausedFetch is Fetch while paused: nothing, after maxWait.
func (s *Subscriber) pausedFetch(ctx context.Context, maxWait time.Duration) ([]broker.Delivery, error) {
	t := time.NewTimer(max2(maxWait, time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, nil
	}
}
