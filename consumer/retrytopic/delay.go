package retrytopic

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/checks"
)

// Delayed wraps the subscriber of a retry topic whose records wait delay.
// Its Fetch hands the fetched records over only once they are due: at
// their idem-retry-not-before time (else their message time + delay, else at
// once), waiting for the latest of a batch. Because every record of the
// topic waits the same delay they are due in publish order, so waiting for
// one never holds a later one past its own due time. The consumer of the
// main topic is not affected: it has its own subscriber.
//
// Each delivery's message Attempt is the overall attempt: the attempt
// recorded in idem-attempt by the stage before plus the delivery's own
// attempt on this topic (2 on the first retry topic, 3 on the second…).
//
// The wrapped subscriber must not redeliver a record while it waits: give
// it an ack wait above delay plus the handler's time (the Kafka adapter
// redelivers in-process after its AckWait, JetStream after its AckWait).
// A wait cut short by ctx hands the records back (Nak 0) for prompt
// redelivery. Delayed forwards broker.Pauser when sub implements it.
func Delayed(sub broker.Subscriber, delay time.Duration) broker.Subscriber {
	return &delayed{sub: sub, delay: delay}
}

type delayed struct {
	sub   broker.Subscriber
	delay time.Duration
}

var _ broker.Pauser = (*delayed)(nil)

// Fetch fetches from the wrapped subscriber and waits until the records
// are due.
func (s *delayed) Fetch(ctx context.Context, limit int, maxWait time.Duration) ([]broker.Delivery, error) {
	ds, err := s.sub.Fetch(ctx, limit, maxWait)
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	var due time.Time
	out := make([]broker.Delivery, len(ds))
	for i, dv := range ds {
		msg := dv.Message()
		due = latest(due, s.due(msg))
		if n, err := strconv.Atoi(msg.Headers[headerAttempt]); err == nil && n > 0 {
			msg.Attempt = n + max(msg.Attempt, 1)
		}
		out[i] = &delivery{Delivery: dv, msg: msg}
	}
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			for _, dv := range ds {
				_ = dv.Nak(sctx, 0)
			}
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return out, nil
}

// due is when msg may be handled.
func (s *delayed) due(msg idem.Message) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, msg.Headers[headerNotBefore]); err == nil {
		return t
	}
	if !msg.Time.IsZero() {
		return msg.Time.Add(s.delay)
	}
	return time.Time{}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Close closes the wrapped subscriber.
func (s *delayed) Close() error { return s.sub.Close() }

// Pause pauses the wrapped subscriber if it is a broker.Pauser.
func (s *delayed) Pause(ctx context.Context) error { return pause(ctx, s.sub) }

func pause(ctx context.Context, sub broker.Subscriber) error {
	if p, ok := sub.(broker.Pauser); ok {
		return p.Pause(ctx)
	}
	return nil
}

// Resume resumes the wrapped subscriber if it is a broker.Pauser.
func (s *delayed) Resume(ctx context.Context) error { return resume(ctx, s.sub) }

func resume(ctx context.Context, sub broker.Subscriber) error {
	if p, ok := sub.(broker.Pauser); ok {
		return p.Resume(ctx)
	}
	return nil
}

// delivery is a wrapped delivery with its overall attempt.
type delivery struct {
	broker.Delivery
	msg idem.Message
}

func (d *delivery) Message() idem.Message { return d.msg }

// Consumers returns the retry consumers of r, one per retry topic: each on
// the subscriber subscribe returns for the topic, wrapped by [Delayed] with
// its delay, and configured with cfg — give it the main topic consumer's
// configuration: the same Name (so the same inbox scope: a message that
// already succeeded is suppressed), the same Handler — with Reroute set to
// r. Last comes the consumer of the dead-letter topic ([DeadLetters], on
// subscribe(r.DLT(), 0)), which parks its records in the dead-letter store,
// unless Config.NoDeadLetterConsumer is set. Run them with the main topic's
// consumer, e.g. with [Run].
func Consumers[TTx any](ib *inbox.Inbox[TTx], r *Retrier, cfg consumer.Config[TTx],
	subscribe func(topic string, delay time.Duration) (broker.Subscriber, error)) ([]*consumer.Consumer[TTx], error) {
	if r == nil || subscribe == nil {
		return nil, checks.Optionf("retrytopic: nil Retrier or subscribe")
	}
	cfg.Reroute = r
	out := make([]*consumer.Consumer[TTx], 0, len(r.stages)+1)
	for i, topic := range r.stages {
		sub, err := subscribe(topic, r.delays[i])
		if err != nil {
			return nil, fmt.Errorf("retrytopic: subscribe %s: %w", topic, err)
		}
		c, err := consumer.New(ib, Delayed(sub, r.delays[i]), cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if r.noDLT {
		return out, nil
	}
	sub, err := subscribe(r.DLT(), 0)
	if err != nil {
		return nil, fmt.Errorf("retrytopic: subscribe %s: %w", r.DLT(), err)
	}
	c, err := DeadLetters(ib, r, cfg, sub)
	if err != nil {
		return nil, err
	}
	return append(out, c), nil
}

// Run runs the consumers concurrently until ctx is done or one of them
// fails; then it stops the others and returns the errors (nil after a
// clean stop).
func Run[TTx any](ctx context.Context, cs ...*consumer.Consumer[TTx]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, c := range cs {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
