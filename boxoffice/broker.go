package boxoffice

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/jetstream"
	"github.com/idemkit/idem/broker/memory"
)

// Broker connects the system to a message broker: one publisher for the
// relay (and redrives), one durable subscription per consumer.
type Broker interface {
	// Publisher returns a publisher; the system closes it.
	Publisher() (broker.Publisher, error)
	// Subscriber returns a subscriber of the durable subscription named
	// durable on the order subject; instances with the same name share its
	// messages. The system closes it.
	Subscriber(ctx context.Context, durable string) (broker.Subscriber, error)
	// Close releases the broker connection.
	Close() error
}

// JetStreamConfig configures [DialJetStream].
type JetStreamConfig struct {
	// URL of the NATS server. Required.
	URL string
	// Stream is the JetStream stream holding the order subject. Defaults
	// to "BOXOFFICE".
	Stream string
	// Subject is the order subject. Defaults to [Subject] ("order-events").
	Subject string
	// Duplicates is the stream's duplicate window: a message id published
	// again inside it is stored once. Defaults to 2 minutes. Keep it shorter
	// than the time before an operator redrives a dead letter, or the
	// redrive (same id) is dropped as a duplicate.
	Duplicates time.Duration
	// AckWait is how long a delivery may stay unacknowledged before it is
	// redelivered. Defaults to 30s.
	AckWait time.Duration
	// Storage is file (the default) or memory.
	Storage natsjs.StorageType
	// MaxAge is how long the stream keeps, and so may redeliver, a
	// message. Defaults to [DefaultStreamMaxAge], inside the consumers'
	// default 7-day inbox retention, so no redelivery can outlive the
	// record that recognises it (the consumers refuse to start otherwise).
	MaxAge time.Duration
}

// DefaultStreamMaxAge is the reference system's stream max age: a day
// inside its consumers' default inbox retention (7 days).
const DefaultStreamMaxAge = 6 * 24 * time.Hour

// JetStreamBroker is a [Broker] on NATS JetStream. Safe for concurrent use.
type JetStreamBroker struct {
	cfg JetStreamConfig
	nc  *nats.Conn
	js  natsjs.JetStream
}

// DialJetStream connects to the NATS server and creates (or updates) the
// stream.
func DialJetStream(ctx context.Context, cfg JetStreamConfig) (*JetStreamBroker, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("boxoffice: JetStream URL is required")
	}
	if cfg.Stream == "" {
		cfg.Stream = "BOXOFFICE"
	}
	if cfg.Subject == "" {
		cfg.Subject = Subject
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = jetstream.DefaultDuplicateWindow
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultStreamMaxAge
	}
	nc, js, err := jetstream.Dial(cfg.URL)
	if err != nil {
		return nil, err
	}
	if _, err := jetstream.EnsureStream(ctx, js, natsjs.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.Subject},
		Duplicates: cfg.Duplicates,
		Storage:    cfg.Storage,
		MaxAge:     cfg.MaxAge,
	}); err != nil {
		nc.Close()
		return nil, err
	}
	return &JetStreamBroker{cfg: cfg, nc: nc, js: js}, nil
}

// Publisher returns a JetStream publisher (Nats-Msg-Id = message id).
func (b *JetStreamBroker) Publisher() (broker.Publisher, error) {
	return jetstream.NewPublisher(b.js, jetstream.PublisherConfig{})
}

// Subscriber returns a pull subscriber of the durable consumer durable.
func (b *JetStreamBroker) Subscriber(ctx context.Context, durable string) (broker.Subscriber, error) {
	return jetstream.NewSubscriber(ctx, b.js, jetstream.SubscriberConfig{
		Stream:         b.cfg.Stream,
		Durable:        durable,
		FilterSubjects: []string{b.cfg.Subject},
		AckWait:        b.cfg.AckWait,
	})
}

// Close closes the NATS connection.
func (b *JetStreamBroker) Close() error {
	b.nc.Close()
	return nil
}

// MemoryBroker is a [Broker] on the in-memory broker, for tests.
type MemoryBroker struct {
	B       *memory.Broker
	Subject string // defaults to "order-events"
}

// Publisher returns a publisher of the memory broker.
func (m MemoryBroker) Publisher() (broker.Publisher, error) { return m.B.Publisher(), nil }

// Subscriber subscribes the group durable to the subject.
func (m MemoryBroker) Subscriber(_ context.Context, durable string) (broker.Subscriber, error) {
	subj := m.Subject
	if subj == "" {
		subj = Subject
	}
	return m.B.Subscribe(subj, durable)
}

// Close does nothing: the caller owns the memory broker.
func (m MemoryBroker) Close() error { return nil }
