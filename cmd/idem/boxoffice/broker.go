package boxoffice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
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
	// URL of the NATS server, or a comma-separated list of the servers of
	// a cluster (nats.Connect fails over between them). Required.
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
	// Replicas is the stream's replica count (its consumers inherit it).
	// Defaults to 0: an existing stream keeps its count (so a worker
	// does not scale a stream down), and a new one gets 3 on a cluster
	// (the server is in a named cluster and the connection knows three
	// servers or more, listed in URL or discovered), so it survives the
	// loss of a node, else 1.
	Replicas int
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
// stream. A cluster that cannot place or update the stream for the moment
// (a node down, a leader election under way) is retried until ctx is
// done: see [transientJS].
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
		cfg.Duplicates = idemjetstream.DefaultDuplicateWindow
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultStreamMaxAge
	}
	nc, js, err := idemjetstream.Dial(cfg.URL)
	if err != nil {
		return nil, err
	}
	sc := natsjs.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.Subject},
		Duplicates: cfg.Duplicates,
		Storage:    cfg.Storage,
		MaxAge:     cfg.MaxAge,
		Replicas:   cfg.Replicas,
	}
	if err := retryJS(ctx, func(ctx context.Context) error {
		if cfg.Replicas == 0 {
			switch s, err := js.Stream(ctx, cfg.Stream); {
			case err == nil:
				sc.Replicas = s.CachedInfo().Config.Replicas
			case !errors.Is(err, natsjs.ErrStreamNotFound):
				return err
			case nc.ConnectedClusterName() != "" && len(nc.Servers()) >= 3:
				sc.Replicas = 3
			}
		}
		_, err := idemjetstream.EnsureStream(ctx, js, sc)
		return err
	}); err != nil {
		nc.Close()
		return nil, err
	}
	return &JetStreamBroker{cfg: cfg, nc: nc, js: js}, nil
}

// Publisher returns a JetStream publisher (Nats-Msg-Id = message id).
func (b *JetStreamBroker) Publisher() (broker.Publisher, error) {
	return idemjetstream.NewPublisher(b.js, idemjetstream.PublisherConfig{})
}

// Subscriber returns a pull subscriber of the durable consumer durable.
// Like the stream, a consumer the cluster cannot create for the moment is
// retried until ctx is done.
func (b *JetStreamBroker) Subscriber(ctx context.Context, durable string) (broker.Subscriber, error) {
	var sub *idemjetstream.Subscriber
	err := retryJS(ctx, func(ctx context.Context) (err error) {
		sub, err = idemjetstream.NewSubscriber(ctx, b.js, idemjetstream.SubscriberConfig{
			Stream:         b.cfg.Stream,
			Durable:        durable,
			FilterSubjects: []string{b.cfg.Subject},
			AckWait:        b.cfg.AckWait,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// retryJS runs f, each attempt bounded by 5s, again while it fails with a
// transient error ([transientJS]) and ctx is not done (at most a minute
// when ctx has no deadline), with a growing pause (up to 1s) between
// attempts. It returns f's last error.
func retryJS(ctx context.Context, f func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	pause := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil || !transientJS(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// transientJS reports whether err is one a JetStream cluster returns while
// a node is down or a leader is being elected, and which a later attempt
// may not: the connection or an API request unavailable or timed out
// (broker.ErrUnavailable, no responders, deadline), no meta leader or
// cluster (JetStream error codes 10006, 10008, 10009), too few peers or
// resources to place the replicas (10005, 10023), the stream offline
// (10118), or a 503.
func transientJS(err error) bool {
	if errors.Is(err, broker.ErrUnavailable) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, natsjs.ErrNoStreamResponse) {
		return true
	}
	var api *natsjs.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case 10005, 10006, 10008, 10009, 10023, 10118:
		return true
	}
	return api.Code == 503
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
