package boxoffice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/webhook"
)

// WebhookSource is the webhook source name of payment notifications; the
// receipts are recorded in the inbox as consumer "webhook:payments".
const WebhookSource = "payments"

// PaymentEvent is the body of POST /webhooks/payments.
type PaymentEvent struct {
	Type string `json:"type"` // "payment.succeeded"; other types are acknowledged and ignored
	Data struct {
		OrderID string `json:"order_id"`
	} `json:"data"`
}

// webhookHandler is POST /webhooks/payments: Standard Webhooks verified on
// the raw body (401 otherwise), deduplicated on the webhook-id through the
// inbox; the first delivery marks the order paid in the same transaction,
// replays answer 200 and change nothing.
func (s *System[TTx]) webhookHandler() (http.Handler, error) {
	v, err := webhook.NewStandard(webhook.StandardConfig{Secrets: s.cfg.WebhookSecrets})
	if err != nil {
		return nil, fmt.Errorf("boxoffice: webhook secret: %w", err)
	}
	rc, err := webhook.NewReceiver(s.inbox, webhook.ReceiverConfig[TTx]{
		Source:         WebhookSource,
		Verifier:       v,
		EnqueueTx:      s.markPaid,
		Now:            s.cfg.Now,
		Logger:         s.cfg.Logger,
		TracerProvider: s.cfg.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		spy := &httpserver.StatusWriter{ResponseWriter: w}
		rc.ServeHTTP(spy, r)
		if spy.Status == http.StatusOK { // a replay: recorded before, nothing enqueued
			s.counts.webhook.Add(1)
			s.metrics.DuplicateContext(r.Context(), "webhook", WebhookSource)
		}
	}), nil
}

// markPaid applies a payment.succeeded delivery: the payment row (UNIQUE
// order_id) and the order's status change commit with the receipt.
func (s *System[TTx]) markPaid(ctx context.Context, tx TTx, d webhook.Delivery, body []byte) error {
	var ev PaymentEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return idem.Permanent(fmt.Errorf("%w: payment webhook body: %v", idem.ErrInvalidInput, err))
	}
	if ev.Type != "payment.succeeded" {
		return nil // acknowledged, nothing to do
	}
	if !ValidOrderID(ev.Data.OrderID) { // checked before the query: NUL or invalid UTF-8 never reach the database
		return idem.Permanent(fmt.Errorf("%w: payment for %q, which is not an order id", idem.ErrInvalidInput, ev.Data.OrderID))
	}
	q := s.db.Tx(tx)
	var status string
	err := q.QueryRow(ctx, `SELECT status FROM `+s.t.orders+` WHERE order_id = $1`, ev.Data.OrderID).Scan(&status)
	if errors.Is(err, store.ErrNoRows) {
		return idem.Permanent(fmt.Errorf("%w: payment for unknown order %q", idem.ErrInvalidInput, ev.Data.OrderID))
	}
	if err != nil {
		return err
	}
	n, err := q.Exec(ctx, insertOrSkip(s.db.Dialect(), `INSERT INTO `+s.t.payments+` (order_id, webhook_id, created_at) VALUES ($1, $2, $3)`,
		`(order_id)`), ev.Data.OrderID, d.ID, store.Micros(s.now()))
	if err != nil {
		return err
	}
	if n == 1 {
		_, err = q.Exec(ctx, `UPDATE `+s.t.orders+` SET status = $2, paid_at = $3 WHERE order_id = $1`,
			ev.Data.OrderID, StatusPaid, store.Micros(s.now()))
	}
	return err
}
