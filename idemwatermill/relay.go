package idemwatermill

import (
	"context"
	"fmt"
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
)

// RelayPublisherConfig configures a RelayPublisher. Zero fields take their
// defaults.
type RelayPublisherConfig struct {
	// KeyMetadata names the metadata key the ordering key (idem.Message.Key)
	// is written under. Defaults to MetadataKey.
	KeyMetadata string
}

// RelayPublisher is an idem broker.Publisher over a Watermill
// message.Publisher, so that idem's outbox relay (and a dead-letter
// redrive) publishes through whatever transport the service already uses
// with Watermill (Kafka, AMQP, NATS, SQL, gochannel…):
//
//	relay, err := outbox.NewRelay(d, idemwatermill.NewRelayPublisher(pub, idemwatermill.RelayPublisherConfig{}), outbox.RelayConfig{})
//	err = idem.Run(ctx, relay)
//
// Each idem message becomes a Watermill message whose UUID is the message id
// (the outbox event id, stable across republishes, so consumers dedup on it),
// whose metadata are the headers (the CloudEvents ce-* attributes among them)
// plus the ordering key, and whose payload is the payload. Messages are
// handed to the Watermill publisher in order, one Publish call per run of
// consecutive messages of one topic. The relay counts a message as
// delivered when that call returns nil: its durability is the Watermill
// publisher's (a synchronous Kafka producer, AMQP with publisher confirms).
// A Watermill broker that drops a repeated UUID also drops a dead-letter
// redrive, which carries the original id.
type RelayPublisher struct {
	pub message.Publisher
	key string
}

// NewRelayPublisher returns a RelayPublisher publishing through pub.
func NewRelayPublisher(pub message.Publisher, cfg RelayPublisherConfig) *RelayPublisher {
	if cfg.KeyMetadata == "" {
		cfg.KeyMetadata = MetadataKey
	}
	return &RelayPublisher{pub: pub, key: cfg.KeyMetadata}
}

// Publish publishes msgs in order to their subjects (Watermill topics).
func (r *RelayPublisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := broker.ValidateMessages("watermill", "subject (topic)", msgs); err != nil {
		return err
	}
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && msgs[end].Subject == msgs[start].Subject {
			end++
		}
		out := make([]*message.Message, 0, end-start)
		for _, m := range msgs[start:end] {
			out = append(out, r.toWatermill(ctx, m))
		}
		if err := r.pub.Publish(msgs[start].Subject, out...); err != nil {
			return fmt.Errorf("idemwatermill: publish to %q: %w", msgs[start].Subject, err)
		}
		start = end
	}
	return nil
}

func (r *RelayPublisher) toWatermill(ctx context.Context, m idem.Message) *message.Message {
	wm := message.NewMessage(m.ID, m.Payload)
	if len(m.Headers) > 0 {
		wm.Metadata = maps.Clone(m.Headers)
	}
	if m.Key != "" {
		wm.Metadata.Set(r.key, m.Key)
	}
	wm.SetContext(ctx)
	return wm
}

// Close does nothing: the Watermill publisher belongs to the caller, who
// closes it after the relay stopped.
func (r *RelayPublisher) Close() error { return nil }
