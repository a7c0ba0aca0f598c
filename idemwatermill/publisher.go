package idemwatermill

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// MetadataKey is the Watermill metadata key that carries an event's ordering
// key (outbox.Event.Key) by default: the Publisher reads it, the
// RelayPublisher writes it back. Events with the same non-empty key are
// published in the order they were written.
const MetadataKey = "idem-key"

var (
	// ErrNoTx reports a Publish whose messages carry no transaction in their
	// context while PublisherConfig.OwnTx is off: writing them outside the
	// business transaction would lose the outbox's atomicity, so the
	// publisher refuses. Give the messages the handler's context
	// (out.SetContext(msg.Context())), use Publisher.PublisherTx, or set
	// OwnTx.
	ErrNoTx = errors.New("idemwatermill: no transaction in the messages' context")
	// ErrMixedTx reports a Publish whose messages carry different
	// transactions (or some carry one and others none).
	ErrMixedTx = errors.New("idemwatermill: the messages of one Publish carry different transactions")
	// ErrPublisherClosed reports a Publish after Close.
	ErrPublisherClosed = errors.New("idemwatermill: publisher closed")
)

// PublisherConfig configures a Publisher. Zero fields take their defaults.
type PublisherConfig struct {
	// OwnTx lets Publish write messages whose context carries no
	// transaction in a transaction of the publisher's own, committed before
	// Publish returns (the events are then durable, but not atomic with
	// any business change). Defaults to false: such a Publish fails with
	// ErrNoTx.
	OwnTx bool
	// KeyMetadata names the metadata key holding an event's ordering key.
	// Defaults to MetadataKey.
	KeyMetadata string
	// Event maps a Watermill message published to topic to the outbox
	// event written for it. Defaults to EventOf with KeyMetadata.
	Event func(topic string, msg *message.Message) (outbox.Event, error)
}

// Publisher is a Watermill message.Publisher that writes messages to idem's
// transactional outbox in the caller's transaction; idem's relay
// (outbox.Relay) then publishes them to the broker at least once, in order
// per ordering key, with the message UUID as the broker message id. Run the
// relay next to the service, publishing to a Watermill publisher through
// RelayPublisher:
//
//	relay, err := outbox.NewRelay(d, idemwatermill.NewRelayPublisher(kafkaPublisher, idemwatermill.RelayPublisherConfig{}), outbox.RelayConfig{})
//	go idem.Run(ctx, relay)
//
// The transaction comes from the messages' context (TxFromContext: a handler
// under the Middleware gives its outgoing messages msg.Context()), or from
// PublisherTx. A message UUID is one event: a UUID already in the outbox
// (a retried Publish) is not written again, and the same UUID with another
// payload, type or topic fails with idem.ErrFingerprintMismatch, so give
// each topic's copy of a message a UUID of its own. Safe for concurrent
// use.
type Publisher[TTx any] struct {
	d      store.Driver[TTx]
	ob     *outbox.Outbox[TTx]
	cfg    PublisherConfig
	closed atomic.Bool
}

// NewPublisher returns a Publisher writing to ob, whose store is d.
func NewPublisher[TTx any](d store.Driver[TTx], ob *outbox.Outbox[TTx], cfg PublisherConfig) (*Publisher[TTx], error) {
	if d == nil || ob == nil {
		return nil, fmt.Errorf("%w: idemwatermill: NewPublisher needs a driver and an outbox", idem.ErrInvalidOption)
	}
	if cfg.KeyMetadata == "" {
		cfg.KeyMetadata = MetadataKey
	}
	if cfg.Event == nil {
		key := cfg.KeyMetadata
		cfg.Event = func(topic string, msg *message.Message) (outbox.Event, error) {
			return EventOf(topic, msg, key), nil
		}
	}
	return &Publisher[TTx]{d: d, ob: ob, cfg: cfg}, nil
}

// EventOf is the default mapping of a Watermill message published to topic:
// ID = msg.UUID, Topic = topic, Payload = msg.Payload, Headers = the
// metadata, Key = the metadata under keyMetadata, and the CloudEvents
// attributes a message may carry in its metadata (ce-type, ce-source,
// ce-subject, content-type); Type defaults to topic.
func EventOf(topic string, msg *message.Message, keyMetadata string) outbox.Event {
	md := msg.Metadata
	ev := outbox.Event{
		ID:              msg.UUID,
		Topic:           topic,
		Type:            md.Get(outbox.HeaderType),
		Source:          md.Get(outbox.HeaderSource),
		Subject:         md.Get(outbox.HeaderSubject),
		DataContentType: md.Get(outbox.HeaderContentType),
		Payload:         msg.Payload,
		Headers:         maps.Clone(map[string]string(md)),
	}
	if keyMetadata != "" {
		ev.Key = md.Get(keyMetadata)
	}
	if ev.Type == "" {
		ev.Type = topic
	}
	return ev
}

// Publish writes msgs to the outbox for topic, in the transaction their
// context carries (all the same one), or, with PublisherConfig.OwnTx and no
// transaction in any of them, in a transaction of its own. Nothing is sent
// to a broker here: the relay publishes the events after the commit.
func (p *Publisher[TTx]) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	tx, ctx, found, err := txOf[TTx](msgs)
	if err != nil {
		return err
	}
	if found {
		return p.PublishTx(ctx, tx, topic, msgs...)
	}
	if !p.cfg.OwnTx {
		return ErrNoTx
	}
	// A transaction of our own outlives a cancelled message context, as a
	// broker publish would; the context's values (trace) are kept.
	ctx = context.WithoutCancel(msgs[0].Context())
	return store.InTx(ctx, p.d, func(tx TTx) error {
		return p.PublishTx(ctx, tx, topic, msgs...)
	})
}

// txOf returns the one transaction the messages' contexts carry.
func txOf[TTx any](msgs []*message.Message) (tx TTx, ctx context.Context, found bool, err error) {
	var first any
	for i, m := range msgs {
		v := m.Context().Value(txKey{})
		if i == 0 {
			first = v
			continue
		}
		if v != first {
			return tx, nil, false, ErrMixedTx
		}
	}
	if first == nil {
		return tx, nil, false, nil
	}
	tv, ok := first.(*txValue[TTx])
	if !ok {
		return tx, nil, false, fmt.Errorf("%w: idemwatermill: the messages' transaction is a %T, the publisher's store wants a %T", idem.ErrInvalidInput, first, tv)
	}
	return tv.tx, msgs[0].Context(), true, nil
}

// PublishTx writes msgs to the outbox for topic in tx, whatever their
// context carries.
func (p *Publisher[TTx]) PublishTx(ctx context.Context, tx TTx, topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrPublisherClosed
	}
	events := make([]outbox.Event, 0, len(msgs))
	for _, m := range msgs {
		ev, err := p.cfg.Event(topic, m)
		if err != nil {
			return fmt.Errorf("idemwatermill: message %s: %w", m.UUID, err)
		}
		events = append(events, ev)
	}
	_, err := p.ob.EnqueueTx(ctx, tx, events...)
	return err
}

// PublisherTx returns a message.Publisher bound to tx: its Publish writes
// to the outbox in tx whatever the messages' context holds, with ctx for
// the database calls. Use it for code that publishes through a
// message.Publisher inside its own transaction.
func (p *Publisher[TTx]) PublisherTx(ctx context.Context, tx TTx) message.Publisher {
	return txPublisher[TTx]{p: p, ctx: ctx, tx: tx}
}

// Close marks the publisher closed: later Publish calls fail with
// ErrPublisherClosed. It closes neither the store nor the outbox, which
// the caller owns.
func (p *Publisher[TTx]) Close() error {
	p.closed.Store(true)
	return nil
}

// txPublisher is a Publisher bound to one transaction.
type txPublisher[TTx any] struct {
	p   *Publisher[TTx]
	ctx context.Context
	tx  TTx
}

func (t txPublisher[TTx]) Publish(topic string, msgs ...*message.Message) error {
	return t.p.PublishTx(t.ctx, t.tx, topic, msgs...)
}

// Close does nothing: the transaction belongs to the caller.
func (t txPublisher[TTx]) Close() error { return nil }
