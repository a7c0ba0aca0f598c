package boxoffice

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/retrytopic"
	"github.com/idemkit/idem/inbox"
)

// RetryTopics runs consumer name (ConsumerNotification, ConsumerBilling or
// ConsumerSearch) with non-blocking retry topics, as the delivery-semantics
// document's Spring listener does (@RetryableTopic, 1 s, 4 s, 16 s, then
// "-dlt"): a transient failure on order-events moves the event to
// order-events-retry-1s, then -4s, then -16s, then order-events-dlt,
// through pub, while main keeps consuming order-events. subscribe returns
// the subscriber of each retry topic (its ack wait above the delay). delays
// nil means retrytopic.DefaultDelays.
//
// Retry topics let a later event of the same order or show overtake one
// that waits for its retry. Each consumer is safe with that: notification
// and billing hold one row per order (UNIQUE), and search applies the
// seats left through the version guard, so an older availability retried
// after a newer one changes nothing (counted in StaleUpdates).
func (s *System[TTx]) RetryTopics(name string, pub broker.Publisher, main broker.Subscriber,
	subscribe func(topic string, delay time.Duration) (broker.Subscriber, error), delays []time.Duration) (*retrytopic.Retrier, func(context.Context) error, error) {
	var h inbox.Handler[TTx]
	switch name {
	case ConsumerNotification:
		h = s.hs.Notification
	case ConsumerBilling:
		h = s.hs.Billing
	case ConsumerSearch:
		h = s.hs.Search
	default:
		return nil, nil, fmt.Errorf("boxoffice: no consumer %q", name)
	}
	r, err := retrytopic.New(retrytopic.Config{Topic: s.cfg.Subject, Delays: delays, Publisher: pub})
	if err != nil {
		return nil, nil, err
	}
	cfg := s.consumerConfig(name, h)
	cfg.Reroute = r
	first, err := consumer.New(s.inbox, main, cfg)
	if err != nil {
		return nil, nil, err
	}
	retries, err := retrytopic.Consumers(s.inbox, r, cfg, subscribe)
	if err != nil {
		return nil, nil, err
	}
	cs := append([]*consumer.Consumer[TTx]{first}, retries...)
	return r, func(ctx context.Context) error { return retrytopic.Run(ctx, cs...) }, nil
}
