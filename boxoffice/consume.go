package boxoffice

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
)

// consumerRunner returns the loop of one consumer instance: fetch a batch,
// process it through the inbox in one transaction (each message in its own
// savepoint), acknowledge after the commit; dead-letter permanent failures
// and messages out of attempts, and send transient failures back with a
// full-jitter backoff.
func (s *System) consumerRunner(name string, sub broker.Subscriber, h inbox.Handler[*sql.Tx]) func(context.Context) error {
	return func(ctx context.Context) error {
		log := s.log.With("consumer", name)
		idle := 0
		for ctx.Err() == nil {
			ds, err := sub.Fetch(ctx, s.cfg.Batch, 500*time.Millisecond)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				idle++
				log.Warn("fetch failed", "err", err)
				sleepCtx(ctx, s.backoff(min(idle, 8)))
				continue
			}
			idle = 0
			if len(ds) > 0 {
				s.processBatch(ctx, name, ds, h)
			}
		}
		return nil
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// backoff is full jitter: uniform in [0, min(max, base·2^(attempt-1))].
func (s *System) backoff(attempt int) time.Duration {
	d := s.cfg.RetryBase << min(max(attempt-1, 0), 20)
	if d > s.cfg.RetryMax || d <= 0 {
		d = s.cfg.RetryMax
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// inboxID is the identity a consumer dedups on: the message id, except for
// billing, which dedups on the business key invoice:<orderId> (so even a
// copy of the event under another id cannot bill twice).
func inboxID(consumer string, msg idem.Message) (string, error) {
	if consumer != ConsumerBilling {
		return msg.ID, nil
	}
	oc, err := DecodeOrderConfirmed(msg)
	if err != nil {
		return "", err
	}
	return InvoiceKey(oc.OrderID), nil
}

func (s *System) processBatch(ctx context.Context, name string, ds []broker.Delivery, h inbox.Handler[*sql.Tx]) {
	// Work on a context that survives shutdown long enough to settle the
	// batch: a half-processed batch is simply redelivered.
	wctx := context.WithoutCancel(ctx)
	msgs := make([]idem.Message, 0, len(ds))
	live := make([]broker.Delivery, 0, len(ds))
	for _, d := range ds {
		m := d.Message()
		id, err := inboxID(name, m)
		if err != nil {
			s.fail(wctx, name, d, err)
			continue
		}
		m.ID = id
		msgs = append(msgs, m)
		live = append(live, d)
	}
	if len(msgs) == 0 {
		return
	}
	out, err := s.inbox.ProcessBatch(wctx, name, msgs, h)
	if err != nil {
		s.log.Warn("batch failed, redelivering", "consumer", name, "n", len(msgs), "err", err)
		for _, d := range live {
			_ = d.Nak(wctx, s.backoff(d.Message().Attempt))
		}
		return
	}
	for i, o := range out {
		d := live[i]
		if o.Err != nil {
			s.fail(wctx, name, d, o.Err)
			continue
		}
		if o.Result == inbox.Duplicate {
			s.counts.consumerDup(name).Add(1)
			s.metrics.Duplicate("inbox", name)
		} else {
			s.metrics.Processed(name)
		}
		if err := d.Ack(wctx); err != nil {
			// The effect is committed; the redelivery will be a duplicate.
			s.log.Warn("ack failed", "consumer", name, "message_id", d.Message().ID, "err", err)
		}
	}
}

// fail settles a delivery whose processing failed: permanent errors and
// exhausted attempts are parked in the dead-letter store (then the delivery
// is terminated); anything else is sent back for redelivery.
func (s *System) fail(ctx context.Context, name string, d broker.Delivery, cause error) {
	m := d.Message()
	class := idem.ErrorClass(cause)
	s.metrics.Failed(name, class)
	if !idem.IsPermanent(cause) && m.Attempt < s.cfg.MaxAttempts {
		s.metrics.Retry(name)
		if err := d.Nak(ctx, s.backoff(m.Attempt)); err != nil {
			s.log.Warn("nak failed", "consumer", name, "message_id", m.ID, "err", err)
		}
		return
	}
	if errors.Is(cause, idem.ErrFingerprintMismatch) {
		s.metrics.FingerprintConflict("inbox", name)
	}
	l := dlq.FromMessage(name, m, cause)
	if _, err := s.dlq.Park(ctx, l); err != nil {
		// Not parked: never terminate; it comes back.
		s.log.Error("dead-letter park failed", "consumer", name, "message_id", m.ID, "err", err)
		_ = d.Nak(ctx, s.backoff(m.Attempt))
		return
	}
	s.counts.deadLettered.Add(1)
	s.metrics.DeadLettered(name, class)
	if err := d.Term(ctx); err != nil {
		s.log.Warn("term failed", "consumer", name, "message_id", m.ID, "err", err)
	}
}
