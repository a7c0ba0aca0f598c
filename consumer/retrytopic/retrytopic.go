// Package retrytopic gives a consumer non-blocking retries through retry
// topics, as Spring Kafka's @RetryableTopic does: a record of topic T whose
// handler failed transiently is republished to T-retry-1s, then (failing
// again) to T-retry-4s, then T-retry-16s, and finally to the dead-letter
// topic T-dlt. A permanent failure (idem.Permanent, invalid input, a
// payload reused under another id) goes to T-dlt at once.
//
//	r, err := retrytopic.New(retrytopic.Config{Topic: "order-events", Publisher: pub}) // delays 1s, 4s, 16s
//	cfg := consumer.Config[pgx.Tx]{Name: "notification", Handler: apply, Reroute: r}   // failures move on
//	first, err := consumer.New(d, ib, mainSub, cfg)
//	retries, err := retrytopic.Consumers(d, ib, r, cfg, func(topic string, delay time.Duration) (broker.Subscriber, error) {
//		return subscribe(topic) // one subscription per retry topic, and one for order-events-dlt
//	})
//	err = retrytopic.Run(ctx, append([]*consumer.Consumer[pgx.Tx]{first}, retries...)...)
//
// Topic names are an interface: a retry topic is T + "-retry-" + the delay
// in Go's short form (1s, 4s, 16s, 500ms, 1m, 1h30m: see [RetryTopic]),
// the dead-letter topic T + "-dlt" ([DLT]).
//
// Every republished record keeps the message id, key, payload and headers
// and carries, in headers, where it came from and why it failed:
//
//	idem-original-topic      the topic it was first consumed from (T)
//	idem-original-position   its position there (Kafka "partition/offset",
//	                         JetStream stream sequence, AMQP delivery tag)
//	idem-original-partition  Kafka only: the partition
//	idem-original-offset     Kafka only: the offset
//	idem-attempt             the attempt that failed (1 on T, 2 on the first retry topic…)
//	idem-error-class         idem.ErrorClass of the failure (transient, permanent, …)
//	idem-error-message       the error text (at most 1024 bytes)
//	idem-retry-not-before    when the record is due (RFC 3339), publish time + the stage's delay
//	Idem-Redrive             "retrytopic:" + the topic + "@" + the original position
//	                         (broker.HeaderRedrive): JetStream, which drops a repeated
//	                         message id, dedups it per stage and journey instead (a
//	                         redriven dead letter travels the stages again from its new
//	                         position)
//
// # The dead-letter topic and the dead-letter store
//
// The records of T-dlt are parked in idem's dead-letter store (package
// dlq, the database's dead_letters table) by the consumer of the
// dead-letter topic, [DeadLetters], which [Consumers] includes by default
// (Config.NoDeadLetterConsumer leaves T-dlt to a consumer of your own). So
// a message that exhausted its retry topics, or failed permanently, is
// listed by `idem dlq list`, shown by `idem dlq show` and the console, and
// counted among the parked letters, like a message the consumer runtime
// dead-lettered itself: under the main consumer's name, with the original
// topic and position as the letter's source and position, the attempts,
// error class and text of the headers above, and the record's headers
// (idem-original-*, idem-attempt, idem-error-*, and the idem-origin-*
// coordinates of the record on T-dlt). A duplicate record on T-dlt parks
// once: the store's unique key (consumer, message id, payload among parked
// letters) updates the letter already parked.
//
// `idem dlq redrive` republishes such a letter to its source, the original
// topic T (not T-dlt): the main topic's consumer processes it through its
// inbox, where the failed attempts left no record. Should it fail again it
// starts a new journey through the retry topics (its original-* headers
// then name its new position on T) and parks a new letter.
//
// # Delivery semantics
//
// The main topic's delivery is acknowledged only after the retry record
// was durably accepted by the broker (broker.Publisher's contract): if the
// publish fails, the delivery is redelivered instead (at least once, never
// lost). A crash between the publish and the ack republishes the record: two
// copies travel the retry topics, and the inbox lets exactly one of them
// take effect.
//
// The retry consumers run the same handler under the same consumer name, so
// the same inbox: the dedup identity stays (consumer name, message id), and
// a retried record whose message already succeeded (a redelivered copy) is
// suppressed as a duplicate. Each retry topic is consumed by its own
// consumer whose subscriber is wrapped by [Delayed]: it holds each fetched
// record until its due time before handing it over. Records of one retry
// topic all wait the same delay, so they are due in the order they were
// published and waiting for the first never delays a later one past its own
// due time. The main topic's consumer keeps flowing meanwhile.
//
// # Ordering: non-blocking versus blocking retries
//
// Non-blocking retries trade per-key order for throughput: while a record
// waits in a retry topic, the records behind it on its partition — the same
// key included — are processed. An OrderCancelled can thus be applied
// before the OrderConfirmed that precedes it. Use them when each message
// stands alone, or make the handler insensitive to order with
// versionguard (apply a version only if newer than the stored one: a late
// retried older event then changes nothing).
//
// When per-key order matters and the handler cannot be made tolerant, use
// blocking retries instead (consumer.Config.RetryInPlace): the failed
// record is retried in place with backoff while the subscription is paused,
// so nothing behind it moves — at the price of the whole partition (with
// Concurrency 1, the whole consumer) waiting for it, and a poison record
// stalling it until MaxAttempts sends it to the dead-letter store.
package retrytopic

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/errtext"
)

// The headers of a republished record; see the package documentation.
const (
	headerOriginalTopic     = "idem-original-topic"
	headerOriginalPosition  = "idem-original-position"
	headerOriginalPartition = "idem-original-partition"
	headerOriginalOffset    = "idem-original-offset"
	headerAttempt           = "idem-attempt"
	headerErrorClass        = "idem-error-class"
	headerErrorMessage      = "idem-error-message"
	headerNotBefore         = "idem-retry-not-before"
)

// maxErrorMessage is the most bytes of the error text put in
// idem-error-message: longer text is cut on a rune boundary and ends
// with "…"; invalid UTF-8 is replaced by U+FFFD and NUL bytes removed.
const maxErrorMessage = 1024

// DefaultDelays are the retry topics' delays when Config.Delays is nil:
// 1s, 4s, 16s (Spring's delay 1000, multiplier 4, three retries).
var DefaultDelays = []time.Duration{time.Second, 4 * time.Second, 16 * time.Second}

// RetryTopic returns the retry topic of topic for delay: topic +
// "-retry-" + the delay in Go's short form (1s, 4s, 16s, 1m, 1h30m, 500ms),
// that is time.Duration's String without its zero trailing units.
func RetryTopic(topic string, delay time.Duration) string {
	return topic + "-retry-" + shortDuration(delay)
}

// DLT returns the dead-letter topic of topic: topic + "-dlt".
func DLT(topic string) string { return topic + "-dlt" }

// shortDuration is d.String() without zero trailing units: 1m0s is 1m, 1h0m0s
// is 1h, 1h30m0s is 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Config configures a [Retrier].
type Config struct {
	// Topic is the main topic (subject) T. Required.
	Topic string
	// Delays are the retry stages' delays, in order. nil means
	// DefaultDelays; an empty non-nil slice sends every failure straight to
	// the dead-letter topic. Each must be positive and distinct.
	Delays []time.Duration
	// Publisher publishes the retry and dead-letter records. Required.
	Publisher broker.Publisher
	// NoDeadLetterConsumer leaves the dead-letter topic to a consumer of
	// your own: [Consumers] then builds no [DeadLetters] consumer, and the
	// records of T-dlt are not parked in the dead-letter store.
	NoDeadLetterConsumer bool
}

// Retrier routes a topic's failed records through its retry topics to its
// dead-letter topic. It implements consumer.Rerouter: set it as
// consumer.Config.Reroute of the main topic's consumer and of every retry
// consumer (see [Consumers]). It is safe for concurrent use.
type Retrier struct {
	topic  string
	delays []time.Duration
	stages []string // retry topics, in order
	pub    broker.Publisher
	noDLT  bool // Config.NoDeadLetterConsumer
}

var _ consumer.Rerouter = (*Retrier)(nil)

// New validates cfg and returns a Retrier.
func New(cfg Config) (*Retrier, error) {
	if cfg.Topic == "" || cfg.Publisher == nil {
		return nil, checks.Optionf("retrytopic: Topic and Publisher are required")
	}
	delays := cfg.Delays
	if delays == nil {
		delays = DefaultDelays
	}
	r := &Retrier{topic: cfg.Topic, delays: slices.Clone(delays), pub: cfg.Publisher, noDLT: cfg.NoDeadLetterConsumer}
	for _, d := range delays {
		if d <= 0 {
			return nil, checks.Optionf("retrytopic: delay %s is not positive", d)
		}
		t := RetryTopic(cfg.Topic, d)
		if slices.Contains(r.stages, t) {
			return nil, checks.Optionf("retrytopic: delay %s given twice", d)
		}
		r.stages = append(r.stages, t)
	}
	return r, nil
}

// Topic returns the main topic.
func (r *Retrier) Topic() string { return r.topic }

// RetryTopics returns the retry topics, in order (each with its delay at
// the same index of [Retrier.Delays]).
func (r *Retrier) RetryTopics() []string { return slices.Clone(r.stages) }

// Delays returns the retry topics' delays, in order.
func (r *Retrier) Delays() []time.Duration { return slices.Clone(r.delays) }

// DLT returns the dead-letter topic.
func (r *Retrier) DLT() string { return DLT(r.topic) }

// Topics returns every topic the Retrier publishes to: the retry topics
// and the dead-letter topic (to create them).
func (r *Retrier) Topics() []string { return append(r.RetryTopics(), r.DLT()) }

// stage returns the index of subject among the retry topics, -1 for the
// main topic (or any other subject).
func (r *Retrier) stage(subject string) int { return slices.Index(r.stages, subject) }

// Next returns the topic a record consumed from subject goes to after a
// failure with err: the next retry topic (with its delay), or the
// dead-letter topic (delay 0) after the last one or for a permanent error.
func (r *Retrier) Next(subject string, err error) (topic string, delay time.Duration) {
	next := r.stage(subject) + 1
	if idem.IsPermanent(err) || next >= len(r.stages) {
		return r.DLT(), 0
	}
	return r.stages[next], r.delays[next]
}

// Reroute publishes msg, which failed with err, to its next topic (see
// [Retrier.Next]) with the headers of the package documentation, and
// returns once the broker durably accepted it. A message consumed from the
// dead-letter topic itself is not rerouted (consumer.ErrNotRerouted).
func (r *Retrier) Reroute(ctx context.Context, msg idem.Message, err error) error {
	if msg.Subject == r.DLT() {
		return fmt.Errorf("retrytopic: %s is the dead-letter topic: %w", msg.Subject, consumer.ErrNotRerouted)
	}
	topic, delay := r.Next(msg.Subject, err)
	out := msg
	out.Subject = topic
	out.Attempt = 0
	out.Position = ""
	out.Headers = make(map[string]string, len(msg.Headers)+8)
	for k, v := range msg.Headers {
		out.Headers[k] = v
	}
	// A record consumed from the main topic starts a journey (a redriven
	// dead letter carries the original-* headers of its previous one).
	if _, ok := msg.Headers[headerOriginalTopic]; !ok || msg.Subject == r.topic {
		out.Headers[headerOriginalTopic] = msg.Subject
		out.Headers[headerOriginalPosition] = msg.Position
		delete(out.Headers, headerOriginalPartition)
		delete(out.Headers, headerOriginalOffset)
		if p, o, ok := strings.Cut(msg.Position, "/"); ok {
			out.Headers[headerOriginalPartition] = p
			out.Headers[headerOriginalOffset] = o
		}
	}
	out.Headers[headerAttempt] = strconv.Itoa(max(msg.Attempt, 1))
	out.Headers[headerErrorClass] = idem.ErrorClass(err)
	out.Headers[headerErrorMessage] = errtext.Cut(err.Error(), maxErrorMessage)
	// A deliberate republish: a broker deduplicating by message id
	// (JetStream) dedups it per stage and journey instead of dropping it: a
	// copy republished twice to one stage (a crash before the ack) is
	// dropped once, a redriven letter's new journey is not.
	out.Headers[broker.HeaderRedrive] = "retrytopic:" + topic + "@" + out.Headers[headerOriginalPosition]
	if delay > 0 {
		out.Headers[headerNotBefore] = time.Now().Add(delay).UTC().Format(time.RFC3339Nano)
	} else {
		delete(out.Headers, headerNotBefore)
	}
	if perr := r.pub.Publish(ctx, out); perr != nil {
		return fmt.Errorf("retrytopic: publish %q to %s: %w", msg.ID, topic, perr)
	}
	return nil
}
