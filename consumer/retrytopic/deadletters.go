package retrytopic

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/origin"
)

// DeadLetters returns the consumer of r's dead-letter topic, reading sub
// (a subscription of [Retrier.DLT]): it parks every record in the
// dead-letter store (cfg.DLQ, by default the one of d), so that a record
// that exhausted its retry topics, or failed permanently, is listed by
// `idem dlq list`, shown by the console and redriven by `idem dlq redrive`
// like any dead letter. [Consumers] includes it unless
// Config.NoDeadLetterConsumer is set.
//
// It is the consumer runtime's own dead-lettering, on the failure the
// record's headers recorded: the letter's consumer is cfg.Name (the main
// topic consumer's name), its source and position are the original topic
// and position (idem-original-topic, idem-original-position; a record
// without them is given r's main topic), its attempts the attempt that
// failed last (idem-attempt), its error class and text those of
// idem-error-class and idem-error-message (after "gave up after N
// attempts: " when the class is not permanent), and its headers the
// record's own — the idem-original-*, idem-attempt and idem-error-* ones
// included — plus the idem-origin-* coordinates of the record on the
// dead-letter topic. The letter is parked in its own transaction, then the
// delivery is terminated; if parking fails, or the consumer fails before
// the recorded failure (the database: a begin, the inbox lookup, a
// deadlock), the delivery is naked with backoff and redelivered, so a
// record is never lost and a letter never carries the database's error.
//
// A redelivered record (the process died between parking and the Term)
// parks once: the dead-letter store's unique key (consumer, message id,
// payload fingerprint among parked letters) makes the second park update
// the first letter. A record whose message meanwhile succeeded under
// cfg.Name (another copy passed a retry topic) is acknowledged as a
// duplicate through the inbox, without a letter.
//
// Because the letter's source is the original topic, a redrive republishes
// the message there, to the main topic's consumer, which processes it
// through its inbox (the failed attempts committed nothing). If it fails
// again it travels the retry topics again, and its new dead-letter record
// parks a new letter (the redriven one is no longer parked).
//
// From cfg, DeadLetters keeps Name, MessageID, DLQ, Logger, Observer (the
// failure itself is not counted again), TracerProvider,
// Concurrency, FetchWait, Backoff, StreamMaxAge and AcceptShortRetention; the
// handler, schema, reroute, retries in place, gate and hooks are not used.
func DeadLetters[TTx any](ib *inbox.Inbox[TTx], r *Retrier, cfg consumer.Config[TTx], sub broker.Subscriber) (*consumer.Consumer[TTx], error) {
	if r == nil || sub == nil {
		return nil, checks.Optionf("retrytopic: nil Retrier or subscriber")
	}
	dl := consumer.Config[TTx]{
		Name:                 cfg.Name,
		MessageID:            cfg.MessageID,
		DLQ:                  cfg.DLQ,
		Logger:               cfg.Logger,
		TracerProvider:       cfg.TracerProvider,
		Concurrency:          cfg.Concurrency,
		FetchWait:            cfg.FetchWait,
		Backoff:              cfg.Backoff, // before a redelivery when parking failed
		StreamMaxAge:         cfg.StreamMaxAge,
		AcceptShortRetention: cfg.AcceptShortRetention,
		// One attempt: the record already failed for good; its recorded
		// failure is parked at once, whatever its class.
		MaxAttempts: 1,
		// Any other failure (the database: begin, the inbox record, a
		// MySQL deadlock between two instances) is not the message's: it
		// is redelivered with backoff instead of being parked.
		Reroute: redeliverOthers{},
		Handler: func(_ context.Context, _ TTx, msg idem.Message) error {
			return RecordedError(msg.Headers)
		},
	}
	if cfg.Observer != nil {
		dl.Observer = uncounted{cfg.Observer}
	}
	return consumer.New(ib, &dltSubscriber{sub: sub, topic: r.Topic()}, dl)
}

// RecordedError rebuilds the failure recorded in a retry or dead-letter
// record's headers: its text is idem-error-message (or a note that the
// header is missing) and its idem.ErrorClass is idem-error-class
// ("permanent", "invalid_input", "fingerprint_mismatch", "timeout",
// "canceled", "panic"; any other class, or none, is "transient"), so errors.Is and
// idem.IsPermanent answer as for the original error.
func RecordedError(headers map[string]string) error {
	text, ok := headers[headerErrorMessage]
	if !ok {
		text = "retrytopic: record on the dead-letter topic without " + headerErrorMessage
	}
	e := &recordedError{text: text}
	switch headers[headerErrorClass] {
	case "permanent":
		e.cause = idem.Permanent(errors.New(text))
	case "invalid_input":
		e.cause = idem.ErrInvalidInput
	case "fingerprint_mismatch":
		e.cause = idem.ErrFingerprintMismatch
	case "timeout":
		e.cause = context.DeadlineExceeded
	case "canceled":
		e.cause = context.Canceled
	case "panic":
		e.cause = idem.ErrPanic
	}
	return e
}

// redeliverOthers is the dead-letter consumer's Rerouter: the recorded
// failure is left to the consumer, which parks it (consumer.ErrNotRerouted);
// any other failure is refused, so the consumer naks the delivery with
// backoff and the broker redelivers it.
type redeliverOthers struct{}

func (redeliverOthers) Reroute(_ context.Context, _ idem.Message, err error) error {
	var re *recordedError
	if errors.As(err, &re) {
		return consumer.ErrNotRerouted
	}
	return fmt.Errorf("retrytopic: dead-letter record not parked (%w); redelivered", err)
}

// recordedError is a failure rebuilt from headers: its own text, and a
// cause that gives it its class.
type recordedError struct {
	text  string
	cause error
}

func (e *recordedError) Error() string { return e.text }
func (e *recordedError) Unwrap() error { return e.cause }

// dltSubscriber presents the dead-letter topic's records as the messages
// they were on the main topic: subject and position from the original-*
// headers, the attempt that failed last.
type dltSubscriber struct {
	sub   broker.Subscriber
	topic string // the main topic, for a record without headerOriginalTopic
}

var _ broker.Pauser = (*dltSubscriber)(nil)

// Fetch fetches from the wrapped subscriber.
func (s *dltSubscriber) Fetch(ctx context.Context, limit int, maxWait time.Duration) ([]broker.Delivery, error) {
	ds, err := s.sub.Fetch(ctx, limit, maxWait)
	if err != nil {
		return ds, err
	}
	for i, dv := range ds {
		msg := dv.Message()
		msg.Subject = s.topic
		if t := msg.Headers[headerOriginalTopic]; t != "" {
			msg.Subject = t
		}
		if p, ok := msg.Headers[headerOriginalPosition]; ok {
			msg.Position = p
		}
		if n, err := strconv.Atoi(msg.Headers[headerAttempt]); err == nil && n > 0 {
			msg.Attempt = n
		}
		ds[i] = &delivery{Delivery: dv, msg: msg}
	}
	return ds, nil
}

// Close closes the wrapped subscriber.
func (s *dltSubscriber) Close() error { return s.sub.Close() }

// Pause pauses the wrapped subscriber if it is a broker.Pauser.
func (s *dltSubscriber) Pause(ctx context.Context) error { return pause(ctx, s.sub) }

// Resume resumes the wrapped subscriber if it is a broker.Pauser.
func (s *dltSubscriber) Resume(ctx context.Context) error { return resume(ctx, s.sub) }

// uncounted forwards to an Observer except Failed: a dead-letter record's
// failure was counted when it happened, on the topic it failed on.
type uncounted struct{ idem.Observer }

func (uncounted) Failed(string, string) {}

// Origin returns the wrapped delivery's broker coordinates (broker.Locator),
// for the dead letter's idem-origin-* headers.
func (d *delivery) Origin() map[string]string { return maps.Clone(origin.Of(d.Delivery)) }
