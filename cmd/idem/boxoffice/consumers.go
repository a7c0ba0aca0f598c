package boxoffice

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/versionguard"
)

// Consumer names: each is the inbox scope of one component, so the same
// message is processed once per consumer.
const (
	ConsumerNotification = "notification"
	ConsumerBilling      = "billing"
	ConsumerSearch       = "search"
)

// Consumers lists the boxoffice's consumers in a stable order.
var consumerNames = []string{ConsumerNotification, ConsumerBilling, ConsumerSearch}

// EffectKindEmail is the effect kind of e-mails sent through the provider.
const EffectKindEmail = "email"

// ConfirmationEmailKey is the effect key (and provider idempotency key) of
// the confirmation e-mail of orderID.
func ConfirmationEmailKey(orderID string) string { return "order-confirmed-email:" + orderID }

// InvoiceKey is the business key of the invoice of orderID; the billing
// consumer dedups on it instead of the message id, so even an event
// re-published under a new id cannot bill twice.
func InvoiceKey(orderID string) string { return "invoice:" + orderID }

// DecodeOrderConfirmed reads an OrderConfirmed event from a delivered
// message. Anything that is not a well-formed OrderConfirmed is a permanent
// error (wrapping idem.ErrInvalidInput): it goes to the dead-letter store.
// Every field is held to what the order API itself accepts (order id
// format, tenant, event id, plain e-mail address, currency), so bytes the
// database would reject are dead-lettered here instead of being retried.
func DecodeOrderConfirmed(msg idem.Message) (OrderConfirmed, error) {
	var oc OrderConfirmed
	ev, err := outbox.FromMessage(msg)
	if err != nil {
		return oc, idem.Permanent(err)
	}
	if ev.Type != EventTypeOrderConfirmed {
		return oc, fmt.Errorf("%w: event type %q is not %s", idem.ErrInvalidInput, ev.Type, EventTypeOrderConfirmed)
	}
	if !utf8.Valid(msg.Payload) {
		return oc, fmt.Errorf("%w: OrderConfirmed payload is not UTF-8", idem.ErrInvalidInput)
	}
	dec := json.NewDecoder(strings.NewReader(string(msg.Payload)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&oc); err != nil {
		return oc, fmt.Errorf("%w: OrderConfirmed payload: %v", idem.ErrInvalidInput, err)
	}
	switch {
	case !ValidOrderID(oc.OrderID):
		return oc, fmt.Errorf("%w: OrderConfirmed without a valid order_id", idem.ErrInvalidInput)
	case oc.EventID == "" || oc.Seats < 1 || oc.TotalCents <= 0 || oc.EventVersion < 1 || oc.SeatsLeft < 0:
		return oc, fmt.Errorf("%w: OrderConfirmed %s has invalid fields", idem.ErrInvalidInput, oc.OrderID)
	case oc.CustomerEmail == "" || oc.Currency == "" || oc.Tenant == "":
		return oc, fmt.Errorf("%w: OrderConfirmed %s misses fields", idem.ErrInvalidInput, oc.OrderID)
	case !tenantRe.MatchString(oc.Tenant) || !eventIDRe.MatchString(oc.EventID) || !currencyRe.MatchString(oc.Currency) || !plainEmail(oc.CustomerEmail):
		return oc, fmt.Errorf("%w: OrderConfirmed %s has malformed fields", idem.ErrInvalidInput, oc.OrderID)
	}
	return oc, nil
}

// Handlers are the boxoffice's consumer handlers, each applying one event in
// the caller's transaction (the inbox row commits with it). They are safe
// for concurrent use.
type Handlers[TTx any] struct {
	db     store.Driver[TTx]
	t      tables
	ledger *effect.Ledger[TTx]
	now    func() time.Time
	// Fault, if set, runs first in every handler (drills inject transient
	// and permanent failures through it).
	Fault func(consumer string, oc OrderConfirmed, msg idem.Message) error
	stale *atomic.Int64 // stale (out-of-order) availability updates
}

// Notification records the confirmation e-mail (unique per order and kind)
// and schedules its sending as an effect keyed ConfirmationEmailKey: the
// effect worker calls the provider with that key after the commit.
func (h *Handlers[TTx]) Notification(ctx context.Context, tx TTx, msg idem.Message) error {
	e, err := h.recordEmail(ctx, tx, msg)
	if err != nil {
		return err
	}
	if _, _, err := h.ledger.ScheduleTx(ctx, tx, e); err != nil {
		return fmt.Errorf("notification: %w", err)
	}
	return nil
}

// NotificationBatch is [Handlers.Notification] for the new messages of a
// fetched batch (consumer.Config.BatchHandler): the e-mail rows are queued
// with the batch's savepoint release (inbox.Exec) and the effects are
// scheduled in one pipelined round trip (effect.Ledger.ScheduleBatchTx),
// instead of two round trips per message. Each effect is traced to its own
// message's delivery. Any failure (an invalid event, a fault, a database
// error) fails the whole call; the consumer then applies each message
// through Notification on its own, so the same rows and effects result.
func (h *Handlers[TTx]) NotificationBatch(ctx context.Context, tx TTx, msgs []idem.Message) error {
	es := make([]effect.Effect, 0, len(msgs))
	for _, msg := range msgs {
		e, err := h.recordEmail(ctx, tx, msg)
		if err != nil {
			return err
		}
		e.TraceParent, e.TraceState = effect.TraceContext(consumer.MessageContext(ctx, msg))
		es = append(es, e)
	}
	if _, err := h.ledger.ScheduleBatchTx(ctx, tx, es); err != nil {
		return fmt.Errorf("notification: %w", err)
	}
	return nil
}

// recordEmail decodes msg's OrderConfirmed event, writes the
// outgoing_emails row of its confirmation e-mail (skipped when it exists)
// through inbox.Exec, so in a batch's fast pass it travels with the
// savepoint's release, and returns the e-mail effect to schedule.
func (h *Handlers[TTx]) recordEmail(ctx context.Context, tx TTx, msg idem.Message) (effect.Effect, error) {
	oc, err := h.decode(ConsumerNotification, msg)
	if err != nil {
		return effect.Effect{}, err
	}
	key := ConfirmationEmailKey(oc.OrderID)
	if err := inbox.Exec(ctx, h.db, tx, insertOrSkip(h.db.Dialect(), `INSERT INTO `+h.t.emails+` (order_id, kind, effect_key, recipient, created_at)
		VALUES ($1, $2, $3, $4, $5)`, `(order_id, kind)`),
		oc.OrderID, EmailKindConfirmation, key, oc.CustomerEmail, store.Micros(h.now())); err != nil {
		return effect.Effect{}, fmt.Errorf("notification: %w", err)
	}
	body, _ := json.Marshal(map[string]any{
		"to":       oc.CustomerEmail,
		"template": EmailKindConfirmation,
		"order_id": oc.OrderID,
		"event_id": oc.EventID,
		"seats":    oc.Seats,
	})
	return effect.Effect{Key: key, Kind: EffectKindEmail, Payload: body}, nil
}

// Billing creates the order's one invoice (UNIQUE order_id, key
// InvoiceKey). The insert goes through inbox.Exec: in a batch's fast pass
// the invoices of the batch travel together with its savepoint release.
func (h *Handlers[TTx]) Billing(ctx context.Context, tx TTx, msg idem.Message) error {
	oc, err := h.decode(ConsumerBilling, msg)
	if err != nil {
		return err
	}
	if err := inbox.Exec(ctx, h.db, tx, insertOrSkip(h.db.Dialect(), `INSERT INTO `+h.t.invoices+` (invoice_key, order_id, tenant, amount_cents, currency, message_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, ``),
		InvoiceKey(oc.OrderID), oc.OrderID, oc.Tenant, oc.TotalCents, oc.Currency, msg.ID, store.Micros(h.now())); err != nil {
		return fmt.Errorf("billing: %w", err)
	}
	return nil
}

// Search projects the seats left of the order's event, version-guarded: an
// event older than the stored availability changes nothing.
func (h *Handlers[TTx]) Search(ctx context.Context, tx TTx, msg idem.Message) error {
	oc, err := h.decode(ConsumerSearch, msg)
	if err != nil {
		return err
	}
	res, err := versionguard.ApplyTx(ctx, h.db, tx, versionguard.Spec{
		Table:      h.t.guardAvailability,
		KeyColumns: []string{"event_id"},
		KeyValues:  []any{oc.EventID},
		Set:        map[string]any{"seats_left": oc.SeatsLeft, "updated_at": store.Micros(h.now())},
		Upsert:     true,
	}, oc.EventVersion)
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	if res.Stale && h.stale != nil {
		h.stale.Add(1)
	}
	return nil
}

func (h *Handlers[TTx]) decode(consumer string, msg idem.Message) (OrderConfirmed, error) {
	oc, err := DecodeOrderConfirmed(msg)
	if err != nil {
		return oc, err
	}
	if h.Fault != nil {
		if err := h.Fault(consumer, oc, msg); err != nil {
			return oc, err
		}
	}
	return oc, nil
}
