package boxoffice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/horizon"
	"github.com/idemkit/idem/internal/checks"
)

// KafkaConfig configures [DialKafka].
type KafkaConfig struct {
	// Brokers are the seed brokers (host:port). Required.
	Brokers []string
	// Topic is the order topic. Defaults to [Subject] ("order-events").
	Topic string
	// Partitions is the topic's partition count when DialKafka creates it.
	// Defaults to 3.
	Partitions int32
	// Replication is the topic's replication factor when DialKafka creates
	// it. Defaults to 1.
	Replication int16
	// Retention is the topic's retention.ms when DialKafka creates it: how
	// long Kafka keeps, and so may deliver again, a record (a new consumer
	// group or an offset reset reads from the oldest record kept).
	// Defaults to [DefaultStreamMaxAge], inside the consumers' default
	// 7-day inbox retention.
	Retention time.Duration
	// AckWait is how long a delivery may stay unacknowledged before the
	// subscriber delivers it again. Defaults to 30s.
	AckWait time.Duration
	// SessionTimeout is the consumer group session timeout: how long the
	// group waits for a member that stopped heartbeating (a killed process)
	// before it gives its partitions to the others. Defaults to franz-go's
	// (45s); a real cluster refuses one below its
	// group.min.session.timeout.ms (6s by default).
	SessionTimeout time.Duration
	// Opts are extra franz-go options for every client (TLS, SASL…).
	Opts []kgo.Opt
}

// KafkaBroker is a [Broker] on Kafka: the order topic, one consumer group
// per durable subscription (named "<topic>.<durable>", so systems on other
// topics of one cluster keep apart), offsets committed only after the
// consumer's transaction committed (broker/kafka). Kafka has no dedup by
// message id: a relay's republish writes a second record, which the
// consumers' inboxes absorb. Safe for concurrent use.
type KafkaBroker struct {
	cfg   KafkaConfig
	admin *kgo.Client
}

// DialKafka connects to the cluster and creates the topic (with its
// partitions, replication and retention) unless it exists.
func DialKafka(ctx context.Context, cfg KafkaConfig) (*KafkaBroker, error) {
	if len(cfg.Brokers) == 0 {
		return nil, checks.Optionf("boxoffice: Kafka brokers are required")
	}
	cfg.Topic = cmp.Or(cfg.Topic, Subject)
	cfg.Partitions = cmp.Or(cfg.Partitions, 3)
	cfg.Replication = cmp.Or(cfg.Replication, 1)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultStreamMaxAge)
	cfg.AckWait = cmp.Or(cfg.AckWait, 30*time.Second)
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.Opts...)...)
	if err != nil {
		return nil, fmt.Errorf("boxoffice: kafka: %w", errors.Join(err, idem.ErrInvalidOption))
	}
	b := &KafkaBroker{cfg: cfg, admin: admin}
	if err := b.ensureTopic(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	return b, nil
}

func (b *KafkaBroker) ensureTopic(ctx context.Context) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = b.cfg.Topic
	t.NumPartitions = b.cfg.Partitions
	t.ReplicationFactor = b.cfg.Replication
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name = "retention.ms"
	ms := strconv.FormatInt(b.cfg.Retention.Milliseconds(), 10)
	c.Value = &ms
	t.Configs = append(t.Configs, c)
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 10_000
	resp, err := req.RequestWith(ctx, b.admin)
	if err != nil {
		return fmt.Errorf("boxoffice: kafka: create topic %q: %w", b.cfg.Topic, errors.Join(err, broker.ErrUnavailable))
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("boxoffice: kafka: create topic %q: %w", b.cfg.Topic, err)
		}
	}
	return nil
}

// Brokers returns the seed brokers.
func (b *KafkaBroker) Brokers() []string { return b.cfg.Brokers }

// Topic returns the order topic.
func (b *KafkaBroker) Topic() string { return b.cfg.Topic }

// Publisher returns an idempotent Kafka producer.
func (b *KafkaBroker) Publisher() (broker.Publisher, error) {
	return idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: b.cfg.Brokers, Opts: b.cfg.Opts})
}

// Group returns the consumer group of the durable subscription durable.
func (b *KafkaBroker) Group(durable string) string { return b.cfg.Topic + "." + durable }

// Subscriber joins the consumer group of durable on the order topic. A
// new group starts at the oldest record the topic keeps. The subscriber
// reports the topic's retention as its stream horizon, so the consumer
// refuses to start with an inbox retention shorter than it.
func (b *KafkaBroker) Subscriber(_ context.Context, durable string) (broker.Subscriber, error) {
	opts := b.cfg.Opts
	if t := b.cfg.SessionTimeout; t > 0 {
		opts = append([]kgo.Opt{kgo.SessionTimeout(t), kgo.HeartbeatInterval(t / 5), kgo.RebalanceTimeout(2 * t)}, opts...)
	}
	sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: b.cfg.Brokers, Group: b.Group(durable),
		Topics: []string{b.cfg.Topic}, AckWait: b.cfg.AckWait, Opts: opts})
	if err != nil {
		return nil, err
	}
	return kafkaSubscriber{Subscriber: sub, b: b}, nil
}

// StreamHorizon reads the topic's retention.ms from the cluster: the
// longest a record stays readable, so the latest a redelivery (a group
// reset to the oldest offset, a member's uncommitted records after a
// crash) can come. retention.ms -1 is horizon.Unlimited. Kafka has no
// duplicate window.
func (b *KafkaBroker) StreamHorizon(ctx context.Context) (horizon.Stream, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeTopic
	r.ResourceName = b.cfg.Topic
	r.ConfigNames = []string{"retention.ms"}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, b.admin)
	if err != nil {
		return horizon.Stream{}, fmt.Errorf("boxoffice: kafka: describe topic %q: %w", b.cfg.Topic, errors.Join(err, broker.ErrUnavailable))
	}
	for _, res := range resp.Resources {
		if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
			return horizon.Stream{}, fmt.Errorf("boxoffice: kafka: describe topic %q: %w", b.cfg.Topic, err)
		}
		for _, c := range res.Configs {
			if c.Name != "retention.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return horizon.Stream{}, fmt.Errorf("boxoffice: kafka: topic %q: retention.ms %q: %w", b.cfg.Topic, *c.Value, err)
			}
			h := horizon.Stream{Name: b.cfg.Topic, MaxAge: time.Duration(ms) * time.Millisecond, Source: "kafka topic retention.ms"}
			if ms < 0 {
				h.MaxAge = horizon.Unlimited
			}
			return h, nil
		}
	}
	return horizon.Stream{}, fmt.Errorf("boxoffice: kafka: topic %q reports no retention.ms", b.cfg.Topic)
}

// DeleteTopic deletes the order topic and its records (the drill's
// clean-up of a scenario's topic).
func (b *KafkaBroker) DeleteTopic(ctx context.Context) error {
	req := kmsg.NewPtrDeleteTopicsRequest()
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = kmsg.StringPtr(b.cfg.Topic)
	req.Topics = append(req.Topics, t)
	req.TopicNames = []string{b.cfg.Topic}
	req.TimeoutMillis = 10_000
	resp, err := req.RequestWith(ctx, b.admin)
	if err != nil {
		return fmt.Errorf("boxoffice: kafka: delete topic %q: %w", b.cfg.Topic, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("boxoffice: kafka: delete topic %q: %w", b.cfg.Topic, err)
		}
	}
	return nil
}

// Close closes the admin client.
func (b *KafkaBroker) Close() error {
	b.admin.Close()
	return nil
}

// kafkaSubscriber adds the topic's horizon to a Kafka subscriber.
type kafkaSubscriber struct {
	*idemkafka.Subscriber
	b *KafkaBroker
}

// StreamHorizon implements horizon.StreamReporter.
func (s kafkaSubscriber) StreamHorizon(ctx context.Context) (horizon.Stream, error) {
	return s.b.StreamHorizon(ctx)
}

// KafkaSessionTimeout is the consumer group session timeout on the
// in-process cluster of [StartKafka]: a killed member's partitions move on
// within seconds (franz-go's default is 45s). Kafka's own minimum (6s): at
// 2s, with members killed every few hundred milliseconds on a loaded
// machine, joins timed out and a group could stay in rebalance for good.
const KafkaSessionTimeout = 6 * time.Second

// StartKafka starts an in-process Kafka cluster (franz-go's kfake, one
// broker listening on a free loopback port; nothing stored on disk) for
// the zero set-up default of --broker kafka. Close it after the systems
// using it. Its ListenAddrs are the seed brokers, reachable by other
// processes of the machine.
//
// The cluster expires consumer group members that stopped heartbeating,
// as a real broker does; see [KafkaCluster].
func StartKafka() (*KafkaCluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(KafkaSessionTimeout/2))
	if err != nil {
		return nil, fmt.Errorf("boxoffice: start in-process Kafka: %w", err)
	}
	kc, err := startReaper(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("boxoffice: start in-process Kafka: %w", err)
	}
	return kc, nil
}
