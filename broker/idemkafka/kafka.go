// Package idemkafka adapts Apache Kafka (github.com/twmb/franz-go) to idem's
// broker seam.
//
//	seeds := []string{"kafka-1:9092", "kafka-2:9092"}
//	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: seeds})
//	err = idemkafka.EnsureTopic(ctx, pub.Client(), "order-events", 6, 3) // partitions, replication factor
//	relay, err := outbox.NewRelay(d, pub, outbox.RelayConfig{})         // record key = the ordering key
//	sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{
//		Brokers: seeds, Group: "billing", Topics: []string{"order-events"},
//	})
//	c, err := consumer.New(d, ib, sub, consumer.Config[pgx.Tx]{Name: "billing", Handler: apply})
//	err = idem.Run(ctx, relay, c) // offsets committed only past records whose handler committed
//
// Publishing uses franz-go's idempotent producer (the default: retries
// never duplicate or reorder records within a producer session), puts the
// subject in the topic, the ordering key in the record key (so one key
// stays on one partition, in order) and the message id in the idem-id
// header. Kafka has no broker-side dedup by message id: a relay that
// republishes after a crash writes a second record, which the consumer's
// inbox absorbs.
//
// Consuming uses a consumer group with auto-commit disabled. Ack marks the
// record and commits, synchronously, the offset after the longest prefix of
// settled (acked or terminated) records of its partition, so an offset is
// never committed past a record whose handler has not committed. Nak and
// the ack wait redeliver in-process, without committing past the record.
// A crash or rebalance therefore redelivers everything after the committed
// offset — duplicates, never losses.
package idemkafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
)

// Header names the adapter sets on every record.
const (
	HeaderID   = "idem-id"   // the message id
	HeaderTime = "idem-time" // the producer time (RFC 3339 nano), when not zero
)

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Opts are extra franz-go options, applied last (TLS, SASL, linger…).
	// Disabling idempotent writes (kgo.DisableIdempotentWrite) is refused
	// with idem.ErrInvalidOption.
	Opts []kgo.Opt
	// Logger receives debug logs. Defaults to discard.
	Logger *slog.Logger
}

// Publisher produces to Kafka. It implements [broker.Publisher] and
// [broker.ResultPublisher] and is safe for concurrent use. It owns its
// franz-go client; Close closes it.
type Publisher struct {
	cl     *kgo.Client
	log    *slog.Logger
	closed atomic.Bool
}

// NewPublisher returns a publisher with an idempotent producer (acks from
// all in-sync replicas). Topics are not created implicitly: create them
// with [EnsureTopic] (or let the cluster auto-create them).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if len(cfg.Brokers) == 0 {
		return nil, checks.Optionf("kafka: Brokers are required")
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", errors.Join(err, idem.ErrInvalidOption))
	}
	// Without idempotent writes a producer retry after a lost ack writes
	// the record twice with two offsets, and ordering per key can break.
	if disabled, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); disabled {
		cl.Close()
		return nil, checks.Optionf("kafka: kgo.DisableIdempotentWrite is refused: idem's publisher needs franz-go's idempotent producer")
	}
	return &Publisher{cl: cl, log: obs.Component(cfg.Logger, "broker/kafka")}, nil
}

// Client returns the underlying franz-go client (for admin requests).
func (p *Publisher) Client() *kgo.Client { return p.cl }

// Publish produces msgs; see [Publisher.PublishResults].
func (p *Publisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	_, err := p.PublishResults(ctx, msgs...)
	return err
}

// PublishResults produces msgs (in order per partition) and returns once
// every record is acknowledged by the in-sync replicas, reporting each
// record's "partition/offset". On error the results of the records produced
// before the first failure are returned; republish them all (duplicates
// reach the consumer, whose inbox drops them).
func (p *Publisher) PublishResults(ctx context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	if p.closed.Load() {
		return nil, broker.ErrClosed
	}
	if err := broker.ValidateMessages("kafka", "subject (topic)", msgs); err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, 0, len(msgs))
	for _, m := range msgs {
		recs = append(recs, toRecord(m))
	}
	results := p.cl.ProduceSync(ctx, recs...)
	out := make([]broker.PublishResult, 0, len(msgs))
	for _, r := range results {
		if r.Err != nil {
			if errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				// The broker answered: no topic has this name. A configuration
				// mistake, not an outage.
				return out, idem.Permanent(fmt.Errorf("kafka: produce %q: no topic %q (create it, then retry the parked events): %w",
					idOf(r.Record), r.Record.Topic, errors.Join(r.Err, broker.ErrNoRoute)))
			}
			return out, fmt.Errorf("kafka: produce %q: %w", string(idOf(r.Record)), classify(r.Err))
		}
		out = append(out, broker.PublishResult{ID: idOf(r.Record), Position: position(r.Record)})
	}
	return out, nil
}

func classify(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, kgo.ErrClientClosed) {
		return errors.Join(err, broker.ErrClosed)
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		return err
	}
	return errors.Join(err, broker.ErrUnavailable)
}

func position(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }

func idOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderID {
			return string(h.Value)
		}
	}
	return ""
}

func toRecord(m idem.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Subject, Value: m.Payload}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+2)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderID, Value: []byte(m.ID)})
	if !m.Time.IsZero() {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderTime, Value: []byte(m.Time.UTC().Format(time.RFC3339Nano))})
		r.Timestamp = m.Time
	}
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

func fromRecord(r *kgo.Record, attempt int) idem.Message {
	m := idem.Message{
		Subject:  r.Topic,
		Key:      string(r.Key),
		Payload:  r.Value,
		Attempt:  attempt,
		Position: position(r),
		Time:     r.Timestamp,
	}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderID:
			m.ID = string(h.Value)
		case HeaderTime:
			if t, err := time.Parse(time.RFC3339Nano, string(h.Value)); err == nil {
				m.Time = t
			}
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[h.Key] = string(h.Value)
		}
	}
	return m
}

// Close flushes nothing (Publish is synchronous) and closes the client.
func (p *Publisher) Close() error {
	if p.closed.CompareAndSwap(false, true) {
		p.cl.Close()
	}
	return nil
}

// EnsureTopic creates topic with the given partitions (default 1) and
// replication factor (default 1) through cl, and succeeds if it already
// exists.
func EnsureTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32, replication int16) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = cmp.Or(partitions, 1)
	t.ReplicationFactor = cmp.Or(replication, 1)
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 10_000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: create topic %q: %w", topic, classify(err))
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("kafka: create topic %q: %w", topic, err)
		}
	}
	return nil
}

func kerrFor(code int16) error { return kerr.ErrorForCode(code) }
