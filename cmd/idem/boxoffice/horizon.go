package boxoffice

import (
	"context"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/horizon"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/webhook"
)

// effectMaxAttempts is the e-mail worker's MaxAttempts (effects.go).
const effectMaxAttempts = 20

// Horizons returns the system's replay horizons as configured: the
// Idempotency-Key retention of POST /orders, the relay's retry span, the
// broker's horizons (read from the server: the JetStream stream's max age
// and duplicate window, the Kafka topic's retention.ms; on RabbitMQ each
// consumer queue's x-message-ttl, beyond which nothing is replayed), every
// consumer's inbox retention, the webhook sender's documented retry span against the receiver's retention,
// and the e-mail effect's retry span against the provider's key lifetime.
// The client retry window is not the system's to declare (0). Dead letters
// stay parked until an operator resolves them, so the redrive window is
// unlimited: `idem dlq redrive` refuses the letters it could no longer
// deduplicate.
func (s *System[TTx]) Horizons(ctx context.Context) (horizon.System, error) {
	h := horizon.System{Name: "boxoffice", RedriveWindow: horizon.Unlimited,
		HTTPOperations: []horizon.HTTPOperation{{Name: "POST /orders", KeyRetention: s.cfg.KeyRetention}}}
	r, err := outbox.NewRelay(s.db, nopPublisher{}, outbox.RelayConfig{ClaimTTL: s.cfg.RelayClaimTTL})
	if err != nil {
		return h, err
	}
	h.OutboxRetry = r.RetrySpan()
	stream := s.cfg.Subject
	switch b := s.cfg.Broker.(type) {
	case *JetStreamBroker:
		st, err := idemjetstream.StreamHorizon(ctx, b.js, b.cfg.Stream)
		if err != nil {
			return h, err
		}
		h.Streams = append(h.Streams, st)
		stream = st.Name
	case *KafkaBroker:
		// The topic's retention: a record is readable (by a group reset,
		// or again after a crash before the commit) until it expires.
		st, err := b.StreamHorizon(ctx)
		if err != nil {
			return h, err
		}
		h.Streams = append(h.Streams, st)
	case *AMQPBroker:
		// Each consumer's queue: nothing is replayed beyond the queue, and
		// its x-message-ttl bounds how late a delivery can come.
		for _, c := range []string{ConsumerNotification, ConsumerBilling, ConsumerSearch} {
			h.Streams = append(h.Streams, b.StreamHorizon(b.Queue(c+s.cfg.DurableSuffix)))
		}
	}
	for _, c := range []string{ConsumerNotification, ConsumerBilling, ConsumerSearch} {
		st := stream
		if b, ok := s.cfg.Broker.(*AMQPBroker); ok {
			st = b.Queue(c + s.cfg.DurableSuffix)
		}
		h.Consumers = append(h.Consumers, horizon.Consumer{Name: c, Stream: st, InboxRetention: s.inbox.RetentionOf(c)})
	}
	senderRetry, _ := webhook.SenderRetrySpan("standard")
	h.Webhooks = []horizon.WebhookSource{{Name: WebhookSource + " (Standard Webhooks)", SenderRetry: senderRetry,
		Retention: s.inbox.RetentionOf("webhook:" + WebhookSource)}}
	// The worker's span: every backoff ceiling (FullJitter(RetryBase,
	// RetryMax)) plus one lease per attempt (a crashed call is re-sent after
	// its lease). The fake provider keeps every key for its life.
	span := time.Duration(effectMaxAttempts) * s.cfg.EffectLease
	ceil := s.cfg.RetryBase
	for n := 1; n < effectMaxAttempts; n++ {
		span += min(ceil, s.cfg.RetryMax)
		ceil *= 2
	}
	h.Effects = []horizon.EffectKind{{Kind: EffectKindEmail, RetrySpan: span, KeyLifetime: horizon.Unlimited}}
	return h, nil
}

// duplicateWindow is the broker's duplicate window (0 when it has none, as
// Kafka and RabbitMQ, or it is unknown): the relay warns when its retry span outlives it.
func (s *System[TTx]) duplicateWindow() time.Duration {
	if b, ok := s.cfg.Broker.(*JetStreamBroker); ok {
		return b.cfg.Duplicates
	}
	return 0
}

// nopPublisher lets Horizons build a relay to read its retry span.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, ...idem.Message) error { return nil }
func (nopPublisher) Close() error                                   { return nil }
