// Package idemamqp adapts RabbitMQ (github.com/rabbitmq/amqp091-go) to idem's
// broker seam.
//
//	url := "amqp://guest:guest@127.0.0.1:5672/"
//	err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: "order-events"}) // durable
//	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url}) // confirm mode
//	relay, err := outbox.NewRelay(d, pub, outbox.RelayConfig{})         // message-id = the event's id
//	sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: "order-events"})
//	c, err := consumer.New(d, ib, sub, consumer.Config[pgx.Tx]{Name: "billing", Handler: apply})
//	err = idem.Run(ctx, relay, c) // manual acks after the handler's commit
//
// Publishing uses a channel in confirm mode: Publish returns after the
// broker confirmed every message (persistent, mandatory: an unroutable
// message is an error, never silently dropped). The message id travels in
// the AMQP message-id property, the ordering key in the idem-key header,
// the producer time in idem-time. RabbitMQ does not dedup by message id:
// a republished message is delivered again and the consumer's inbox
// absorbs it.
//
// Consuming uses manual acks on a queue. Nak(delay) holds the message
// (unacknowledged, so a crash still returns it to the queue) for delay,
// then rejects it with requeue; Term rejects it without requeue (to the
// queue's dead-letter exchange, if any). A delivery left unsettled for
// AckWait is requeued by the subscriber itself, since RabbitMQ only
// redelivers when the channel closes.
//
// Connections are re-established on the next call after a failure, so a
// relay resumes by itself once the broker is back.
package idemamqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
)

// Header names the adapter sets on every message.
const (
	HeaderKey  = "idem-key"  // the ordering key, when not empty
	HeaderTime = "idem-time" // the producer time (RFC 3339 nano), when not zero
)

// ErrUnroutable reports a message the broker returned because no queue was
// bound for its routing key. Nothing was stored; declare and bind the
// queue, then publish again. It wraps [broker.ErrNoRoute], and the error
// that carries it is permanent ([idem.Permanent]).
var ErrUnroutable = fmt.Errorf("amqp: message unroutable: %w", broker.ErrNoRoute)

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// URL is the AMQP URL (amqp://user:pass@host:5672/vhost). Required.
	URL string
	// Exchange is the exchange messages are published to, with
	// msg.Subject as the routing key. Defaults to "": the default exchange,
	// which routes to the queue named msg.Subject.
	Exchange string
	// ConfirmTimeout bounds the wait for confirms when ctx has no deadline.
	// Defaults to 5s.
	ConfirmTimeout time.Duration
	// Logger receives debug logs. Defaults to discard.
	Logger *slog.Logger
}

// Publisher publishes with publisher confirms. It implements
// [broker.Publisher] and [broker.ResultPublisher] and is safe for
// concurrent use (calls are serialised on one channel).
type Publisher struct {
	cfg PublisherConfig
	log *slog.Logger

	mu      sync.Mutex // protects the fields below; held during Publish
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  bool
}

// NewPublisher connects to the broker.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, checks.Optionf("amqp: URL is required")
	}
	if cfg.ConfirmTimeout < 0 {
		return nil, checks.Optionf("amqp: negative ConfirmTimeout")
	}
	cfg.ConfirmTimeout = cmp.Or(cfg.ConfirmTimeout, 5*time.Second)
	p := &Publisher{cfg: cfg, log: obs.Component(cfg.Logger, "broker/amqp")}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connectLocked(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Publisher) connectLocked() error {
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	p.dropLocked()
	conn, err := amqp.Dial(p.cfg.URL)
	if err != nil {
		return fmt.Errorf("amqp: dial: %w", errors.Join(err, broker.ErrUnavailable))
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("amqp: channel: %w", errors.Join(err, broker.ErrUnavailable))
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 1024))
	return nil
}

func (p *Publisher) dropLocked() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch, p.returns = nil, nil, nil
}

// Publish publishes msgs; see [Publisher.PublishResults].
func (p *Publisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	_, err := p.PublishResults(ctx, msgs...)
	return err
}

// PublishResults publishes msgs in order and waits for every confirm. The
// position reported is the publish sequence number on the channel. On
// error (connection lost, nack, unroutable) the connection is dropped and
// redialled on the next call; results of messages confirmed before the
// failure are returned.
func (p *Publisher) PublishResults(ctx context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	if err := broker.ValidateMessages("amqp", "subject (routing key)", msgs); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, broker.ErrClosed
	}
	if err := p.connectLocked(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
		defer cancel()
	}
	fail := func(res []broker.PublishResult, err error) ([]broker.PublishResult, error) {
		p.dropLocked()
		return res, err
	}
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, m.Subject, true, false, toPublishing(m))
		if err != nil {
			return fail(nil, fmt.Errorf("amqp: publish %q: %w", m.ID, errors.Join(err, broker.ErrUnavailable)))
		}
		confirms = append(confirms, dc)
	}
	res := make([]broker.PublishResult, 0, len(msgs))
	for i, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			return fail(res, fmt.Errorf("amqp: confirm %q: %w", msgs[i].ID, errors.Join(err, broker.ErrUnavailable)))
		case !ok:
			return fail(res, fmt.Errorf("amqp: broker nacked %q: %w", msgs[i].ID, broker.ErrUnavailable))
		}
		res = append(res, broker.PublishResult{ID: msgs[i].ID, Position: strconv.FormatUint(dc.DeliveryTag, 10)})
	}
	// A basic.return precedes its confirm on the wire, so every return of
	// this batch is buffered by now.
	for {
		select {
		case r := <-p.returns:
			return nil, idem.Permanent(fmt.Errorf("amqp: no queue is bound to routing key %q on exchange %q (message %q): %s: %w",
				r.RoutingKey, p.cfg.Exchange, r.MessageId, r.ReplyText, ErrUnroutable))
		default:
			return res, nil
		}
	}
}

func toPublishing(m idem.Message) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+2)
	for k, v := range m.Headers {
		h[k] = v
	}
	if m.Key != "" {
		h[HeaderKey] = m.Key
	}
	if !m.Time.IsZero() {
		h[HeaderTime] = m.Time.UTC().Format(time.RFC3339Nano)
	}
	return amqp.Publishing{
		MessageId:    m.ID,
		Headers:      h,
		Body:         m.Payload,
		DeliveryMode: amqp.Persistent,
		Timestamp:    m.Time,
	}
}

// Close closes the connection.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.dropLocked()
	return nil
}

// QueueConfig declares a queue with [DeclareQueue].
type QueueConfig struct {
	// Name of the queue. Required.
	Name string
	// Exchange and RoutingKey, if Exchange is set, bind the queue.
	Exchange   string
	RoutingKey string
	// Transient makes the queue non-durable. Defaults to false: durable.
	Transient bool
	// Args are extra queue arguments (x-queue-type: quorum,
	// x-dead-letter-exchange, …).
	Args amqp.Table
}

// DeclareQueue declares (and optionally binds) a queue; declaring an
// existing queue with the same settings is a no-op.
func DeclareQueue(url string, cfg QueueConfig) error {
	if cfg.Name == "" {
		return checks.Optionf("amqp: queue name is required")
	}
	return withChannel(url, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(cfg.Name, !cfg.Transient, false, false, false, cfg.Args); err != nil {
			return fmt.Errorf("amqp: declare %q: %w", cfg.Name, err)
		}
		if cfg.Exchange != "" {
			if err := ch.QueueBind(cfg.Name, cfg.RoutingKey, cfg.Exchange, false, nil); err != nil {
				return fmt.Errorf("amqp: bind %q: %w", cfg.Name, err)
			}
		}
		return nil
	})
}

// DeleteQueue deletes a queue and its messages.
func DeleteQueue(url, name string) error {
	return withChannel(url, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(name, false, false, false)
		return err
	})
}

func withChannel(url string, fn func(*amqp.Channel) error) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("amqp: dial: %w", errors.Join(err, broker.ErrUnavailable))
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: channel: %w", errors.Join(err, broker.ErrUnavailable))
	}
	return fn(ch)
}
