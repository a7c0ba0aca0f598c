package idemwatermill

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemkit/idem/internal/checks"
	"log/slog"
	"maps"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
)

var (
	// ErrOutputWithoutOutbox reports a handler that returned messages while
	// Config.Outbox is unset. The router would publish them after the
	// commit; if that publish failed, the redelivery would be a duplicate
	// whose handler does not run, and the messages would be lost. So the
	// middleware refuses them (a permanent error): set Config.Outbox, and
	// they are written to the outbox in the handler's transaction.
	ErrOutputWithoutOutbox = errors.New("idemwatermill: the handler returned messages but Config.Outbox is unset")
	// ErrNoConsumer reports a message handled with no consumer name: the
	// middleware runs outside a Router handler and Config.Consumer is empty.
	ErrNoConsumer = errors.New("idemwatermill: no consumer name (set Config.Consumer or run under a Router handler)")
)

// Config configures the Middleware. Zero fields take their defaults.
type Config[TTx any] struct {
	// Consumer names the consumer whose inbox records the messages: the
	// (consumer, message id) pair is the dedup key, so two handlers of one
	// topic each process every message once. Defaults to the Router
	// handler's name (message.HandlerNameFromCtx); keep it stable, since
	// renaming it starts an empty inbox.
	Consumer string
	// IDMetadata names a metadata key holding the message id. Defaults to
	// "": the Watermill message UUID, which Watermill carries in the
	// envelope unchanged across redeliveries. Set it when producers put a
	// stable id of their own there (a CloudEvents "ce-id", a business key
	// such as "create-invoice:<order>"). The id is never derived from the
	// payload: two messages with equal bodies are two intents, and the
	// payload fingerprint is what tells a redelivery (same id, same bytes:
	// duplicate) from a reused id (same id, other bytes:
	// idem.ErrFingerprintMismatch). A message without the key fails
	// permanently.
	IDMetadata string
	// Outbox, when set, receives the messages the handler returns: they
	// are written to the outbox in the handler's transaction for the
	// handler's publish topic, and the Router is handed none to publish.
	// Without it a handler returning messages fails with
	// ErrOutputWithoutOutbox.
	Outbox *Publisher[TTx]
	// DeadLetters, when set, parks the messages that cannot be processed
	// in idem's dead-letter store (package dlq; the idem dlq command and
	// the console list and redrive them) and acknowledges them: a
	// permanent error (idem.Permanent, a fingerprint mismatch, a missing
	// id, ErrOutputWithoutOutbox) at once, a transient one after
	// MaxAttempts tries of the delivery. Without it every error is returned
	// to the Router, which nacks the message for redelivery.
	DeadLetters *dlq.Store[TTx]
	// MaxAttempts is how many times one delivery is tried, each try in a
	// transaction of its own after a backoff, before it is dead-lettered
	// (with DeadLetters only). Defaults to 5.
	MaxAttempts int
	// Backoff is the delay between those tries. Defaults to 100ms, at
	// most 5s.
	Backoff idem.Backoff
	// Logger receives duplicates (Debug), retries and dead letters
	// (Warn). Defaults to slog.Default().
	Logger *slog.Logger
}

// Middleware returns a Watermill Router middleware that runs the handler
// once per (consumer, message id) through ib, idem's inbox: it begins a
// transaction, records the message in the inbox in it (a unique
// constraint decides), runs the handler with the transaction in the
// message's context (TxFromContext), and commits. A duplicate — already
// committed for this consumer — is acknowledged without running the
// handler. A handler error rolls back the handler's writes together with the
// inbox record and is returned, so the Router nacks and the redelivery is
// processed afresh (see Config.DeadLetters for poison messages). Messages
// a dead-letter redrive addressed to another consumer
// (broker.HeaderRedriveFor) are acknowledged unprocessed.
//
// Add it to a handler (handler.AddMiddleware) to adopt idem one handler at
// a time, or to the Router for all. Put Watermill's Retry middleware, if
// any, before it (outside), so each retry is a fresh transaction.
func Middleware[TTx any](ib *inbox.Inbox[TTx], cfg Config[TTx]) (message.HandlerMiddleware, error) {
	if ib == nil {
		return nil, fmt.Errorf("%w: idemwatermill: Middleware needs an inbox", idem.ErrInvalidOption)
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: idemwatermill: MaxAttempts %d < 0", idem.ErrInvalidOption, cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Backoff == (idem.Backoff{}) {
		cfg.Backoff = idem.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &mw[TTx]{ib: ib, cfg: cfg}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			return m.handle(msg, h)
		}
	}, nil
}

type mw[TTx any] struct {
	ib  *inbox.Inbox[TTx]
	cfg Config[TTx]
}

func (m *mw[TTx]) handle(msg *message.Message, h message.HandlerFunc) ([]*message.Message, error) {
	ctx := msg.Context()
	consumer := m.cfg.Consumer
	if consumer == "" {
		consumer = message.HandlerNameFromCtx(ctx)
	}
	if consumer == "" {
		return nil, ErrNoConsumer
	}
	im := m.idemMessage(ctx, msg, consumer)
	if broker.ForOtherConsumer(im, consumer) {
		m.cfg.Logger.DebugContext(ctx, "redrive for another consumer acknowledged without processing",
			"consumer", consumer, "message_id", im.ID, "for", im.Headers[broker.HeaderRedriveFor])
		return nil, nil
	}
	for attempt := 1; ; attempt++ {
		im.Attempt = attempt
		err := checks.ID(im.ID)
		if err != nil {
			err = idem.Permanent(fmt.Errorf("idemwatermill: message %s has no usable id: %w", msg.UUID, err))
		} else {
			err = m.once(ctx, consumer, im, msg, h)
		}
		if err == nil {
			return nil, nil
		}
		if m.cfg.DeadLetters == nil || ctx.Err() != nil {
			return nil, err
		}
		park := idem.IsPermanent(err) || errors.Is(err, idem.ErrNeedsReconciliation) || attempt >= m.cfg.MaxAttempts
		if !park {
			delay := m.cfg.Backoff.Delay(attempt, nil)
			m.cfg.Logger.WarnContext(ctx, "processing failed; retrying", "consumer", consumer, "message_id", im.ID,
				"attempt", attempt, "error", err, "class", idem.ErrorClass(err), "delay", delay)
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(delay):
			}
			continue
		}
		if !idem.IsPermanent(err) && !errors.Is(err, idem.ErrNeedsReconciliation) {
			err = fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		l := dlq.FromMessage(consumer, im, err)
		l.Attempts = attempt
		id, perr := m.cfg.DeadLetters.Park(context.WithoutCancel(ctx), l)
		if perr != nil {
			// Never drop a message we could not park: nack it.
			return nil, errors.Join(err, fmt.Errorf("idemwatermill: dead-lettering failed: %w", perr))
		}
		m.cfg.Logger.WarnContext(ctx, "message dead-lettered", "consumer", consumer, "message_id", l.MessageID,
			"letter", id, "error", err, "class", idem.ErrorClass(err))
		return nil, nil
	}
}

// idemMessage is the inbox's view of msg.
func (m *mw[TTx]) idemMessage(ctx context.Context, msg *message.Message, consumer string) idem.Message {
	im := idem.Message{
		ID:      msg.UUID,
		Subject: message.SubscribeTopicFromCtx(ctx),
		Key:     msg.Metadata.Get(MetadataKey),
		Headers: maps.Clone(map[string]string(msg.Metadata)),
		Payload: msg.Payload,
	}
	// A dead-letter revision addressed to this consumer is identified by
	// its own id: the revision recorded the original's identity as
	// consumed already (see dlq.Store.Revise).
	ownRevision := im.Headers[dlq.HeaderRevisionOf] != "" && im.Headers[broker.HeaderRedriveFor] == consumer
	if m.cfg.IDMetadata != "" && !ownRevision {
		im.ID = msg.Metadata.Get(m.cfg.IDMetadata)
	}
	return im
}

// once runs one try of msg in a transaction of its own.
func (m *mw[TTx]) once(ctx context.Context, consumer string, im idem.Message, msg *message.Message, h message.HandlerFunc) (err error) {
	d := m.ib.Driver()
	tx, err := d.Begin(ctx)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			if rerr := d.Rollback(context.WithoutCancel(ctx), tx); rerr != nil {
				m.cfg.Logger.DebugContext(ctx, "rollback failed", "consumer", consumer, "message_id", im.ID, "error", rerr)
			}
		}
	}()
	res, err := m.ib.ProcessTx(ctx, tx, consumer, im, func(hctx context.Context, tx TTx, _ idem.Message) error {
		orig := msg.Context()
		msg.SetContext(ContextWithTx(hctx, tx))
		defer msg.SetContext(orig)
		out, err := h(msg)
		if err != nil || len(out) == 0 {
			return err
		}
		if m.cfg.Outbox == nil {
			return idem.Permanent(ErrOutputWithoutOutbox)
		}
		topic := message.PublishTopicFromCtx(orig)
		if topic == "" {
			return idem.Permanent(fmt.Errorf("%w: idemwatermill: the handler returned messages but has no publish topic", idem.ErrInvalidInput))
		}
		return m.cfg.Outbox.PublishTx(hctx, tx, topic, out...)
	})
	if err != nil {
		return err
	}
	if res == inbox.Duplicate {
		m.cfg.Logger.DebugContext(ctx, "duplicate acknowledged without running the handler", "consumer", consumer, "message_id", im.ID)
		return nil // rolled back: nothing was written
	}
	if err := d.Commit(ctx, tx); err != nil {
		return err
	}
	committed = true
	return nil
}
