package idemkafka

import (
	"context"

	"github.com/idemkit/idem/broker"
)

var _ broker.Pauser = (*Subscriber)(nil)

// Pause stops fetching every topic of the subscription (franz-go's
// PauseFetchTopics, so partitions assigned by a later rebalance stay
// paused too) until Resume: the lag grows in the broker instead of in
// memory. Records already fetched are still delivered and settled, and
// the group membership (heartbeats) carries on, so a long pause causes no
// rebalance.
func (s *Subscriber) Pause(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return broker.ErrClosed
	}
	s.cl.PauseFetchTopics(s.cl.GetConsumeTopics()...)
	return nil
}

// Resume fetches the paused topics again (ResumeFetchTopics).
func (s *Subscriber) Resume(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return broker.ErrClosed
	}
	s.cl.ResumeFetchTopics(s.cl.PauseFetchTopics()...)
	return nil
}

// Paused reports whether fetching is paused (for tests and metrics).
func (s *Subscriber) Paused() bool { return len(s.cl.PauseFetchTopics()) > 0 }

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
