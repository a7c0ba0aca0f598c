package boxoffice

import (
	"cmp"
	"context"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/horizon"
	"github.com/idemkit/idem/internal/checks"
)

// DefaultAMQPExchange is the exchange the reference system publishes to on
// RabbitMQ: the broker's built-in direct exchange, which routes a message
// to every queue bound with its routing key (the order subject). `idem dlq
// redrive --exchange amq.direct` republishes a letter the same way.
const DefaultAMQPExchange = "amq.direct"

// AMQPConfig configures [DialAMQP].
type AMQPConfig struct {
	// URL of the RabbitMQ server (amqp://user:pass@host:5672/vhost).
	// Required.
	URL string
	// Subject is the order subject: the routing key of every order event.
	// Defaults to [Subject] ("order-events").
	Subject string
	// Exchange is the direct exchange the queues are bound to. Defaults to
	// [DefaultAMQPExchange].
	Exchange string
	// Durables are the durable subscriptions whose queues DialAMQP declares
	// and binds at once, before anything is published: RabbitMQ routes a
	// message only to the queues bound when it arrives, so a consumer whose
	// queue did not exist yet would never see it (no replay beyond the
	// queue). Subscriber declares its own queue too.
	Durables []string
	// MaxAge is each queue's x-message-ttl: a message that waited that long
	// in its queue (requeues keep their original expiry) is dropped, so no
	// delivery can come later than MaxAge after the publish. Defaults to
	// [DefaultStreamMaxAge], inside the consumers' default 7-day inbox
	// retention.
	MaxAge time.Duration
	// AckWait is how long a delivery may stay unacknowledged before the
	// subscriber requeues it. Defaults to 30s.
	AckWait time.Duration
}

// AMQPBroker is a [Broker] on RabbitMQ: one durable queue per durable
// subscription, named "<subject>.<durable>" and bound to the exchange with
// the subject as routing key, so every subscription receives every order
// event and the instances of one subscription share its queue. RabbitMQ has
// no dedup by message id: a relay's republish is delivered again and the
// consumers' inboxes absorb it. Safe for concurrent use.
type AMQPBroker struct {
	cfg AMQPConfig
}

// DialAMQP checks the server and declares the queues of cfg.Durables.
func DialAMQP(_ context.Context, cfg AMQPConfig) (*AMQPBroker, error) {
	if cfg.URL == "" {
		return nil, checks.Optionf("boxoffice: the AMQP URL is required")
	}
	cfg.Subject = cmp.Or(cfg.Subject, Subject)
	cfg.Exchange = cmp.Or(cfg.Exchange, DefaultAMQPExchange)
	cfg.MaxAge = cmp.Or(cfg.MaxAge, DefaultStreamMaxAge)
	cfg.AckWait = cmp.Or(cfg.AckWait, 30*time.Second)
	b := &AMQPBroker{cfg: cfg}
	for _, d := range cfg.Durables {
		if err := b.Declare(d); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Queue returns the queue of the durable subscription durable.
func (b *AMQPBroker) Queue(durable string) string { return b.cfg.Subject + "." + durable }

// Exchange returns the exchange the system publishes to.
func (b *AMQPBroker) Exchange() string { return b.cfg.Exchange }

// Declare declares the queue of durable (durable, with the x-message-ttl
// of MaxAge) and binds it to the exchange with the subject as routing key.
// Declaring it again is a no-op.
func (b *AMQPBroker) Declare(durable string) error {
	return idemamqp.DeclareQueue(b.cfg.URL, idemamqp.QueueConfig{Name: b.Queue(durable), Exchange: b.cfg.Exchange,
		RoutingKey: b.cfg.Subject, Args: amqp091.Table{"x-message-ttl": b.cfg.MaxAge.Milliseconds()}})
}

// Publisher returns a publisher with confirms on the exchange.
func (b *AMQPBroker) Publisher() (broker.Publisher, error) {
	return idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: b.cfg.URL, Exchange: b.cfg.Exchange})
}

// Subscriber declares the queue of durable and consumes it. It reports the
// queue's x-message-ttl as its stream horizon, so the consumer refuses to
// start with an inbox retention shorter than it.
func (b *AMQPBroker) Subscriber(_ context.Context, durable string) (broker.Subscriber, error) {
	if err := b.Declare(durable); err != nil {
		return nil, err
	}
	sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: b.cfg.URL, Queue: b.Queue(durable), AckWait: b.cfg.AckWait})
	if err != nil {
		return nil, err
	}
	return amqpSubscriber{Subscriber: sub, h: b.StreamHorizon(b.Queue(durable))}, nil
}

// StreamHorizon is the horizon of queue: RabbitMQ keeps no message past
// its ack (no replay beyond the queue), and the queue's x-message-ttl
// (declared by [AMQPBroker.Declare]; a redeclare with another value is
// refused by the server) drops a message that waited MaxAge, so a
// redelivery comes at most MaxAge after the publish. RabbitMQ has no
// duplicate window.
func (b *AMQPBroker) StreamHorizon(queue string) horizon.Stream {
	return horizon.Stream{Name: queue, MaxAge: b.cfg.MaxAge, Source: "rabbitmq queue x-message-ttl"}
}

// DeleteQueues deletes the queues of durables and their messages (the
// drill's clean-up of a scenario's queues).
func (b *AMQPBroker) DeleteQueues(durables ...string) error {
	var first error
	for _, d := range durables {
		if err := idemamqp.DeleteQueue(b.cfg.URL, b.Queue(d)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close does nothing: publishers and subscribers own their connections.
func (b *AMQPBroker) Close() error { return nil }

// amqpSubscriber adds the queue's horizon to an AMQP subscriber.
type amqpSubscriber struct {
	*idemamqp.Subscriber
	h horizon.Stream
}

// StreamHorizon implements horizon.StreamReporter.
func (s amqpSubscriber) StreamHorizon(context.Context) (horizon.Stream, error) { return s.h, nil }
