package boxoffice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/outbox"
)

// PoisonEventID is the event (concert) id of the orders in poison
// messages, kept apart from real events so that a corrected and redriven
// poison message never touches a real event's availability.
const PoisonEventID = "demo-poison"

// PublishPoison publishes one invalid OrderConfirmed straight to the order
// subject (bypassing the order API and the outbox): a well-formed
// CloudEvent for a made-up order whose seats are 0, which every consumer
// rejects as invalid input and parks in the dead-letter store (one letter
// per consumer). It is for watching the dead-letter path: the letter can be
// redriven (it fails again), discarded, or edited (set "seats" to 1 or
// more) and redriven as a new revision, which that letter's consumer then
// processes (the other consumers skip it: each resolves its own letter).
// It returns the published message.
func (s *System[TTx]) PublishPoison(ctx context.Context) (idem.Message, error) {
	if s.cfg.Broker == nil {
		return idem.Message{}, checks.Optionf("boxoffice: no broker to publish to")
	}
	u, err := uuid.NewV7()
	if err != nil {
		return idem.Message{}, err
	}
	now := s.now().UTC()
	oc := OrderConfirmed{Order: Order{OrderID: "ord_" + u.String(), Tenant: "demo", EventID: PoisonEventID,
		CustomerEmail: "poison@example.com", Seats: 0, TotalCents: 4500, Currency: "EUR", Status: "confirmed", CreatedAt: now},
		SeatsLeft: 0, EventVersion: 1}
	payload, err := json.Marshal(oc)
	if err != nil {
		return idem.Message{}, err
	}
	msg := outbox.Event{ID: "poison-" + u.String(), Source: "boxoffice/demo-poison", Type: EventTypeOrderConfirmed,
		Subject: oc.OrderID, Time: now, DataContentType: "application/json", Topic: s.cfg.Subject, Key: oc.OrderID,
		Payload: payload}.Message()
	pub, err := s.cfg.Broker.Publisher()
	if err != nil {
		return idem.Message{}, err
	}
	defer pub.Close()
	if err := pub.Publish(ctx, msg); err != nil {
		return idem.Message{}, fmt.Errorf("boxoffice: publish poison: %w", err)
	}
	s.log.InfoContext(ctx, "poison message published", "message_id", msg.ID, "order_id", oc.OrderID)
	return msg, nil
}

// PoisonHandler serves POST /demo/poison: it calls [System.PublishPoison]
// and answers 202 with the message id.
func (s *System[TTx]) PoisonHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg, err := s.PublishPoison(r.Context())
		if err != nil {
			s.internalError(w, r, "publish poison", err, "the poison message could not be published")
			return
		}
		s.writeJSON(w, r, http.StatusAccepted, map[string]string{
			"message_id": msg.ID, "order_id": msg.Key,
			"next": "watch it land in the dead letters (/console/dlq), then redrive, discard, or edit seats and redrive it",
		})
	})
}
