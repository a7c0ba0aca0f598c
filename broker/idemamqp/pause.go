package idemamqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/broker"
)

var _ broker.Pauser = (*Subscriber)(nil)

// Pause cancels the subscriber's consumer (basic.cancel): RabbitMQ pushes
// nothing more and the backlog waits in the queue. The deliveries already
// pushed are still handed out by Fetch (before Resume, or after it ahead
// of the new consumer's) and can be settled (the channel stays open);
// once they are read Fetch returns none until Resume. A reconnect while
// paused does not consume either. Lowering the prefetch instead would not
// do: RabbitMQ applies a new per-consumer prefetch only to consumers
// started after it.
func (s *Subscriber) Pause(ctx context.Context) error { return s.setPaused(ctx, true) }

// Resume consumes the queue again (basic.consume with the configured
// Prefetch).
func (s *Subscriber) Resume(ctx context.Context) error { return s.setPaused(ctx, false) }

func (s *Subscriber) setPaused(ctx context.Context, p bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return broker.ErrClosed
	case s.paused == p:
		return nil
	}
	s.paused = p
	if s.ch == nil || s.ch.IsClosed() {
		return nil // the next Fetch reconnects, consuming unless paused
	}
	if p {
		if s.tag == "" {
			return nil
		}
		if err := s.ch.Cancel(s.tag, false); err != nil {
			s.paused = false
			return fmt.Errorf("amqp: pause %q: %w", s.cfg.Queue, err)
		}
		s.tag = ""
		return nil
	}
	ds, err := s.consumeLocked(s.ch)
	if err != nil {
		s.paused = true
		return fmt.Errorf("amqp: resume %q: %w", s.cfg.Queue, err)
	}
	s.deliveries = follow(s.deliveries, ds, s.ch.NotifyClose(make(chan *amqp.Error, 1)))
	return nil
}

// follow returns the deliveries of old (the cancelled consumer's, which
// closes once the deliveries already pushed are read) then of next, so
// that none pushed before a pause is stranded unacknowledged. It stops when
// the channel closes (the broker requeues what was not read).
func follow(old, next <-chan amqp.Delivery, closed <-chan *amqp.Error) <-chan amqp.Delivery {
	if old == nil {
		return next
	}
	out := make(chan amqp.Delivery)
	go func() {
		defer close(out)
		for _, src := range []<-chan amqp.Delivery{old, next} {
			for d := range src {
				select {
				case out <- d:
				case <-closed:
					return
				}
			}
		}
	}()
	return out
}

// Paused reports whether the subscriber is paused.
func (s *Subscriber) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// consumeLocked starts the consumer on ch under a new tag, unless paused
// (then it returns a nil channel, on which Fetch receives nothing).
func (s *Subscriber) consumeLocked(ch *amqp.Channel) (<-chan amqp.Delivery, error) {
	if s.paused {
		s.tag = ""
		return nil, nil
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	s.tag = "idem-" + hex.EncodeToString(b)
	return ch.Consume(s.cfg.Queue, s.tag, false, false, false, false, nil)
}

// cancelled reports whether ds, closed, was the channel of a consumer
// Pause cancelled (it is paused, or Resume has replaced ds since).
func (s *Subscriber) cancelled(ds <-chan amqp.Delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused || ds != s.deliveries
}

// waitPaused is Fetch while paused: no deliveries once timer fires.
func waitPaused(ctx context.Context, timer *time.Timer) ([]broker.Delivery, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, nil
	}
}
