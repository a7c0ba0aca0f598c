package idemamqp

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fingerprint"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/origin"
)

// SubscriberConfig configures a [Subscriber].
type SubscriberConfig struct {
	// URL is the AMQP URL. Required.
	URL string
	// Queue is the queue to consume (declare it with [DeclareQueue]).
	// Required.
	Queue string
	// Prefetch bounds the unacknowledged deliveries held by the
	// subscriber (basic.qos). Defaults to 100.
	Prefetch int
	// AckWait is how long a delivery may stay unsettled before the
	// subscriber requeues it. Defaults to 30s.
	AckWait time.Duration
	// Logger receives debug logs. Defaults to discard.
	Logger *slog.Logger
}

// Subscriber consumes a queue with manual acks. It implements
// [broker.Subscriber] and is safe for concurrent use.
//
// Attempt is x-delivery-count + 1 on quorum queues; on classic queues it
// is counted by this subscriber (per message id) and is at least 2 for a
// message the broker flags as redelivered. A message without a message id
// is counted by its content (routing key and body): copies with the same
// content share a count, as a consumer deriving its identity from the
// payload (consumer.Config.MessageID) sees them as one message.
type Subscriber struct {
	cfg SubscriberConfig
	log *slog.Logger

	fetchMu sync.Mutex // serialises reads of deliveries

	mu         sync.Mutex // protects the fields below
	conn       *amqp.Connection
	ch         *amqp.Channel
	st         *settler // settles the deliveries of ch
	deliveries <-chan amqp.Delivery
	attempts   map[string]attemptCount
	swept      time.Time // the last sweep of attempts (see attempt)
	closed     bool
	tag        string // the consumer tag of ch's consumer (see pause.go)
	paused     bool   // Pause cancelled the consumer until Resume
}

// NewSubscriber connects and starts consuming the queue.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	switch {
	case cfg.URL == "" || cfg.Queue == "":
		return nil, checks.Optionf("amqp: URL and Queue are required")
	case cfg.Prefetch < 0 || cfg.AckWait < 0:
		return nil, checks.Optionf("amqp: negative Prefetch or AckWait")
	}
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 100)
	cfg.AckWait = cmp.Or(cfg.AckWait, 30*time.Second)
	s := &Subscriber{cfg: cfg, log: obs.Component(cfg.Logger, "broker/amqp", "queue", cfg.Queue), attempts: map[string]attemptCount{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.connectLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Subscriber) connectLocked() (<-chan amqp.Delivery, error) {
	if s.closed {
		return nil, broker.ErrClosed
	}
	if s.ch != nil && !s.ch.IsClosed() {
		if s.deliveries != nil || s.paused {
			return s.deliveries, nil
		}
		// The broker cancelled the consumer (see consumerLost): consume
		// again on the same channel, so that the deliveries handed out on
		// it can still be settled.
		ds, err := s.consumeLocked(s.ch)
		if err != nil {
			// A missing queue closed the channel; the next call redials.
			_ = s.conn.Close()
			s.conn, s.ch, s.st, s.deliveries = nil, nil, nil, nil
			return nil, fmt.Errorf("amqp: consume %q: %w", s.cfg.Queue, errors.Join(err, broker.ErrUnavailable))
		}
		s.deliveries = ds
		return ds, nil
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn, s.ch, s.st, s.deliveries = nil, nil, nil, nil
	conn, err := amqp.Dial(s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("amqp: dial: %w", errors.Join(err, broker.ErrUnavailable))
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(s.cfg.Prefetch, 0, false)
	}
	var ds <-chan amqp.Delivery
	if err == nil {
		ds, err = s.consumeLocked(ch)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("amqp: consume %q: %w", s.cfg.Queue, errors.Join(err, broker.ErrUnavailable))
	}
	s.conn, s.ch, s.st, s.deliveries = conn, ch, newSettler(ch), ds
	return ds, nil
}

// Fetch returns up to max deliveries (max < 1 means 1), waiting until one
// arrives, maxWait passes (none, nil error) or ctx is done (ctx's error).
// After a lost connection it reconnects; deliveries of the old connection
// are requeued by the broker. After the broker cancelled the consumer
// (the queue was deleted, or its node failed) it returns
// [broker.ErrUnavailable] once, then consumes the queue again (failing
// while the queue is missing).
func (s *Subscriber) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	max = cmp.Or(max, 1)
	if max < 1 {
		max = 1
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	s.mu.Lock()
	ds, err := s.connectLocked()
	st := s.st
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	var out []broker.Delivery
	select {
	case d, ok := <-ds:
		if !ok {
			if s.cancelled(ds) {
				return waitPaused(ctx, timer)
			}
			s.consumerLost(ds)
			return nil, fmt.Errorf("amqp: consumer of %q closed: %w", s.cfg.Queue, broker.ErrUnavailable)
		}
		out = append(out, s.newDelivery(st, d))
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(out) < max {
		select {
		case d, ok := <-ds:
			if !ok {
				return out, nil
			}
			out = append(out, s.newDelivery(st, d))
		default:
			return out, nil
		}
	}
	return out, nil
}

// consumerLost forgets ds, the deliveries of a consumer the broker
// cancelled (basic.cancel: its queue was deleted or its node failed),
// unless Pause or Resume replaced it meanwhile. amqp091 closes ds but
// leaves the channel open, so without this every later Fetch would get
// the same closed ds, and never consume again; with it the next Fetch
// consumes the queue again (an error while the queue is missing).
func (s *Subscriber) consumerLost(ds <-chan amqp.Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ds == s.deliveries && !s.paused {
		s.deliveries, s.tag = nil, ""
	}
}

func (s *Subscriber) newDelivery(st *settler, d amqp.Delivery) *delivery {
	m := idem.Message{
		ID:       d.MessageId,
		Subject:  d.RoutingKey,
		Payload:  d.Body,
		Position: strconv.FormatUint(d.DeliveryTag, 10),
		Time:     d.Timestamp,
	}
	xdc := -1
	for k, v := range d.Headers {
		switch k {
		case HeaderKey:
			m.Key, _ = v.(string)
		case HeaderTime:
			if str, ok := v.(string); ok {
				if t, err := time.Parse(time.RFC3339Nano, str); err == nil {
					m.Time = t
				}
			}
		case "x-delivery-count":
			switch n := v.(type) {
			case int64:
				xdc = int(n)
			case int32:
				xdc = int(n)
			}
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k] = fmt.Sprint(v)
		}
	}
	count := countKey(m.ID, d.RoutingKey, m)
	m.Attempt = s.attempt(count, d.Redelivered, xdc, time.Now())
	st.track(d.DeliveryTag)
	dl := &delivery{s: s, st: st, tag: d.DeliveryTag, msg: m, exchange: d.Exchange, count: count}
	dl.mu.Lock() // the timer's settle must see dl.timer
	dl.timer = time.AfterFunc(s.cfg.AckWait, dl.expire)
	dl.mu.Unlock()
	return dl
}

// Close cancels the consumer and closes the connection; the broker
// requeues every unsettled delivery at once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn, s.ch, s.st, s.deliveries = nil, nil, nil, nil
	return nil
}

type delivery struct {
	s        *Subscriber
	st       *settler // of the channel it came on
	tag      uint64
	msg      idem.Message
	exchange string
	count    string // the key of its attempt count (countKey)
	timer    *time.Timer

	mu      sync.Mutex
	settled bool // protected by mu
	expired bool // protected by mu: requeued by the ack wait
}

// ErrAckWaitExpired reports an Ack, Nak or Term after the subscriber had
// requeued the delivery because its AckWait passed; the message will be
// delivered again (and deduplicated by the inbox).
var ErrAckWaitExpired = errors.New("amqp: ack wait expired, message requeued")

func (d *delivery) expire() { _ = d.settleAs(true, true, false, true) }

func (d *delivery) Message() idem.Message { return d.msg }

// Origin implements [broker.Locator]: the queue, the delivery tag, and the
// exchange ("" for the default exchange) and routing key of the message.
func (d *delivery) Origin() map[string]string {
	return map[string]string{
		origin.Queue:       d.s.cfg.Queue,
		origin.DeliveryTag: strconv.FormatUint(d.tag, 10),
		origin.Exchange:    d.exchange,
		origin.RoutingKey:  d.msg.Subject,
	}
}

// settle acks or nacks once; later calls are no-ops.
func (d *delivery) settle(nack, requeue, forget bool) error {
	return d.settleAs(nack, requeue, forget, false)
}

func (d *delivery) settleAs(nack, requeue, forget, expiring bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		if d.expired {
			return ErrAckWaitExpired
		}
		return nil
	}
	d.settled, d.expired = true, expiring
	d.timer.Stop()
	if forget {
		d.forget()
	}
	if err := d.st.settle(d.tag, nack, requeue); err != nil {
		return fmt.Errorf("amqp: settle %q: %w", d.msg.ID, errors.Join(err, broker.ErrUnavailable))
	}
	return nil
}

// claim marks an unsettled delivery settled for an ack its caller sends
// (AckBatch) and reports true; for one already settled it reports false,
// with ErrAckWaitExpired if the ack wait requeued it.
func (d *delivery) claim() (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		if d.expired {
			return false, ErrAckWaitExpired
		}
		return false, nil
	}
	d.settled = true
	d.timer.Stop()
	d.forget()
	return true, nil
}

// attemptCount is a message's deliveries counted by this subscriber.
type attemptCount struct {
	n    int
	seen time.Time // its last delivery
}

// Sweeping the attempt counts: a message settled for good by another
// subscriber of the queue (or lost with a connection) is never forgotten
// by this one, so counts not seen for forgetAttemptsAfter (or four
// AckWaits, if longer) are dropped, at most once per sweepEvery and only
// past sweepAbove counts. A message delivered again after that counts
// from 2 (the broker's redelivered flag) again.
const (
	sweepAbove          = 1024
	sweepEvery          = time.Minute
	forgetAttemptsAfter = time.Hour
)

// countKey is the key of a message's attempt count: its id, or, for a
// message without one, a digest of its routing key, key, publisher's
// headers and body (one count for every message without an id would let
// a batch of them count each other's deliveries, and any Ack of one reset
// the count of a poisonous one). Its NUL prefix keeps it apart from the
// ids, used as they are (no allocation per delivery).
func countKey(id, routingKey string, m idem.Message) string {
	if id != "" {
		return id
	}
	// Each part length-prefixed (fingerprint.Hasher), so no two
	// messages' parts run together into the same digest.
	h := fingerprint.New()
	h.AddString(routingKey)
	h.AddString(m.Key)
	// The publisher's headers, in order; not those the broker adds
	// (x-death, x-first-death-*, …), which change between deliveries.
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if !strings.HasPrefix(k, "x-") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		h.AddString(k)
		h.AddString(m.Headers[k])
	}
	h.Add(m.Payload)
	sum := h.Sum()
	return "\x00" + hex.EncodeToString(sum[:])
}

// attempt counts a delivery of the message counted under key at now and
// returns its attempt: one more than this subscriber counted, at least 2
// when the broker flags it redelivered, and at least x-delivery-count + 1
// (xdc, -1 if absent).
func (s *Subscriber) attempt(key string, redelivered bool, xdc int, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.attempts) > sweepAbove && now.Sub(s.swept) >= sweepEvery {
		s.swept = now
		stale := max(forgetAttemptsAfter, 4*s.cfg.AckWait)
		for k, a := range s.attempts {
			if now.Sub(a.seen) > stale {
				delete(s.attempts, k)
			}
		}
	}
	n := s.attempts[key].n + 1
	if redelivered && n < 2 {
		n = 2
	}
	if xdc >= 0 {
		n = max(n, xdc+1)
	}
	s.attempts[key] = attemptCount{n: n, seen: now}
	return n
}

// holdAttempts keeps the attempt count under key from the sweep until
// until (a Nak holding its delivery that long): a delay longer than the
// sweep's staleness would otherwise reset the count, and a message that
// keeps failing would never reach its consumer's MaxAttempts.
func (s *Subscriber) holdAttempts(key string, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.attempts[key]; ok && a.seen.Before(until) {
		a.seen = until
		s.attempts[key] = a
	}
}

// forget drops the attempt count of a message settled for good.
func (d *delivery) forget() {
	d.s.mu.Lock()
	delete(d.s.attempts, d.count)
	d.s.mu.Unlock()
}

// Ack acknowledges the delivery. AMQP acks are not confirmed: a nil error
// means the ack was written to the channel; if the connection drops first,
// the broker redelivers and the inbox dedups.
func (d *delivery) Ack(ctx context.Context) error { return d.settle(false, false, true) }

// Nak keeps the message unacknowledged for delay, then rejects it with
// requeue. If the process dies meanwhile the broker requeues it anyway.
func (d *delivery) Nak(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return d.settle(true, true, false)
	}
	d.mu.Lock()
	if d.settled {
		expired := d.expired
		d.mu.Unlock()
		if expired {
			return ErrAckWaitExpired
		}
		return nil
	}
	d.timer.Stop()
	d.timer = time.AfterFunc(delay, func() { _ = d.settle(true, true, false) })
	d.mu.Unlock()
	d.s.holdAttempts(d.count, time.Now().Add(delay))
	return nil
}

// Term rejects the message without requeue: RabbitMQ drops it or routes it
// to the queue's dead-letter exchange.
func (d *delivery) Term(ctx context.Context) error { return d.settle(true, false, true) }
