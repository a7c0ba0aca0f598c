package boxoffice

import (
	"context"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
)

// consumerRunner returns the loop of one consumer instance, idem's consumer
// runtime: fetch a batch, process it through the inbox in one transaction
// (a failing message is rolled back to its savepoint), acknowledge after the
// commit; dead-letter permanent failures and messages out of attempts, and
// send transient failures back with a full-jitter backoff.
func (s *System[TTx]) consumerRunner(name string, sub broker.Subscriber, h inbox.Handler[TTx]) (func(context.Context) error, error) {
	c, err := consumer.New(s.inbox, sub, s.consumerConfig(name, h))
	if err != nil {
		return nil, err
	}
	return c.Run, nil
}

// consumerConfig is the configuration of consumer name with handler h.
func (s *System[TTx]) consumerConfig(name string, h inbox.Handler[TTx]) consumer.Config[TTx] {
	cfg := consumer.Config[TTx]{
		Name:           name,
		Handler:        h,
		BatchSize:      s.cfg.Batch,
		FetchWait:      500 * time.Millisecond,
		MaxAttempts:    s.cfg.MaxAttempts,
		Backoff:        consumer.Backoff{Base: s.cfg.RetryBase, Max: s.cfg.RetryMax},
		DLQ:            s.dlq,
		Observer:       s.metrics,
		Logger:         s.log,
		TracerProvider: s.cfg.TracerProvider,
	}
	switch name {
	case ConsumerBilling:
		cfg.MessageID = billingID
	case ConsumerNotification:
		// Two round trips per batch instead of two per message: under the
		// soak's load, message by message the notification consumer
		// scheduled about half as many e-mails per second as orders came
		// in (published -> notified p50 18.6 s on PostgreSQL).
		cfg.BatchHandler = s.hs.NotificationBatch
	}
	return cfg
}

// billingID is the identity billing dedups on: the business key
// invoice:<orderId> instead of the event id, so even a copy of the event
// under another id cannot bill twice.
func billingID(msg idem.Message) (string, error) {
	oc, err := DecodeOrderConfirmed(msg)
	if err != nil {
		return "", err
	}
	return InvoiceKey(oc.OrderID), nil
}
