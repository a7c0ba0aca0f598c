package boxoffice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// Problem types of the boxoffice API (RFC 9457 "type" members). The
// idempotency problems (missing or malformed key 400, key reused 422, in
// flight 409) carry idemhttp's own types.
const (
	problemBase = "https://pkg.go.dev/github.com/idemkit/idem/boxoffice#"
	// ProblemInvalidRequest: the body is not a valid order (400).
	ProblemInvalidRequest = problemBase + "ProblemInvalidRequest"
	// ProblemInvalidTenant: X-Tenant-ID is not 1–64 of [A-Za-z0-9_-] (400).
	ProblemInvalidTenant = problemBase + "ProblemInvalidTenant"
	// ProblemSoldOut: the event has fewer seats left than requested (409).
	ProblemSoldOut = problemBase + "ProblemSoldOut"
	// ProblemNotFound: no such order for this tenant (404).
	ProblemNotFound = problemBase + "ProblemNotFound"
	// ProblemInternal: the server failed; nothing was recorded (500). Its
	// detail is always a fixed text: the cause (a database error, say) goes
	// to the log, never to the client.
	ProblemInternal = problemBase + "ProblemInternal"
	// ProblemBodyTooLarge: the body is above MaxOrderBody (413).
	ProblemBodyTooLarge = problemBase + "ProblemBodyTooLarge"
)

// MaxOrderBody caps a POST /orders body (64 KiB): a larger body answers 413
// problem+json before anything is recorded. The idempotency middleware
// enforces it (type idemhttp.TypeBodyTooLarge), and the handler again
// (ProblemBodyTooLarge) in case it is mounted without the middleware.
const MaxOrderBody = 64 << 10

type tenantKey struct{}

// writeProblem answers an RFC 9457 problem (internal/problem, idem's one
// problem+json writer).
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	problem.Write(w, status, problem.Details{Type: typ, Title: title, Status: status, Detail: detail}, 0)
}

// internalError logs err and answers 500 with a fixed detail: what failed
// inside (database errors included) is never shown to the client.
func (s *System[TTx]) internalError(w http.ResponseWriter, r *http.Request, what string, err error, detail string) {
	s.log.ErrorContext(r.Context(), what, "error", err, "method", r.Method, "path", r.URL.Path)
	writeProblem(w, http.StatusInternalServerError, ProblemInternal, "Internal error", detail)
}

func (s *System[TTx]) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.internalError(w, r, "encode response", err, "the response could not be encoded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// withTenant validates X-Tenant-ID (absent → "public", invalid → 400) and
// puts the tenant in the request context for the idempotency scope and the
// handlers.
func withTenant(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals, present := r.Header["X-Tenant-Id"]
		v := ""
		if present {
			if len(vals) != 1 {
				writeProblem(w, http.StatusBadRequest, ProblemInvalidTenant, "Invalid X-Tenant-ID", "send exactly one X-Tenant-ID header")
				return
			}
			v = vals[0]
		}
		tenant, err := ParseTenant(v, present)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, ProblemInvalidTenant, "Invalid X-Tenant-ID", err.Error())
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func tenantOf(r *http.Request) string {
	t, _ := r.Context().Value(tenantKey{}).(string)
	return t
}

// createOrder is POST /orders, run by the idempotency middleware inside its
// transaction: the order, the seats taken and the OrderConfirmed outbox
// event commit together with the key record and the stored response.
func (s *System[TTx]) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	tx, ok := idemhttp.Tx[TTx](ctx)
	if !ok {
		writeProblem(w, http.StatusInternalServerError, ProblemInternal, "Internal error", "no request transaction")
		return
	}
	req, ok := readOrderRequest(w, r)
	if !ok {
		return
	}
	oc, err := s.CreateOrderTx(ctx, tx, tenantOf(r), req)
	if errors.Is(err, ErrSoldOut) {
		writeProblem(w, http.StatusConflict, ProblemSoldOut, "Sold out", "event "+req.EventID+" has fewer than the requested seats left")
		return
	}
	if err != nil {
		s.internalError(w, r, "create order", err, "the order was not created; retry with the same Idempotency-Key")
		return
	}
	idemhttp.SetResource(ctx, "order", oc.OrderID)
	w.Header().Set("Location", "/orders/"+oc.OrderID)
	s.writeJSON(w, r, http.StatusCreated, oc.Order)
}

// readOrderRequest reads and validates an order body, answering 413 or 400
// problem+json (and false) when it is not one.
func readOrderRequest(w http.ResponseWriter, r *http.Request) (OrderRequest, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxOrderBody))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "Request body too large",
			fmt.Sprintf("an order body is at most %d bytes", MaxOrderBody))
		return OrderRequest{}, false
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidRequest, "Invalid order", "unreadable body")
		return OrderRequest{}, false
	}
	req, err := DecodeOrderRequest(body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidRequest, "Invalid order", err.Error())
		return OrderRequest{}, false
	}
	return req, true
}

// CreateOrderTx takes the seats, inserts the order and enqueues its
// OrderConfirmed event (subject Config.Subject, ordering key the order id)
// inside the caller's transaction tx: all of it commits or none of it does.
// It returns ErrSoldOut, changing nothing, when the event has fewer seats
// left than requested. POST /orders calls it in the idempotency
// middleware's transaction.
func (s *System[TTx]) CreateOrderTx(ctx context.Context, tx TTx, tenant string, req OrderRequest) (OrderConfirmed, error) {
	oc, err := createOrderTx(ctx, s.db.Tx(tx), s.t, s.cfg.Seats, tenant, req, s.now())
	if err != nil {
		return oc, err
	}
	payload, _ := json.Marshal(oc)
	evs, err := s.outbox.EnqueueTx(ctx, tx, outbox.Event{
		Type:            EventTypeOrderConfirmed,
		Subject:         oc.OrderID,
		DataContentType: "application/json",
		Topic:           s.cfg.Subject,
		Key:             oc.OrderID,
		Payload:         payload,
	})
	if err != nil {
		return oc, fmt.Errorf("boxoffice: enqueue OrderConfirmed: %w", err)
	}
	if h := s.cfg.Hooks.Enqueued; h != nil && len(evs) == 1 {
		h(oc, evs[0])
	}
	return oc, nil
}

// getOrder is GET /orders/{id}; another tenant's order answers 404, and so
// does an id that is not an order id at all (checked before any query, so
// bytes like %00 or %ff never reach the database).
func (s *System[TTx]) getOrder(w http.ResponseWriter, r *http.Request) {
	id, tenant := r.PathValue("id"), tenantOf(r)
	if !ValidOrderID(id) {
		writeProblem(w, http.StatusNotFound, ProblemNotFound, "Order not found", "not an order id (ord_ and a UUID)")
		return
	}
	o, err := getOrder(r.Context(), s.db.Pool(), s.t, tenant, id)
	if errors.Is(err, store.ErrNoRows) {
		writeProblem(w, http.StatusNotFound, ProblemNotFound, "Order not found", "no order "+id+" for tenant "+tenant)
		return
	}
	if err != nil {
		s.internalError(w, r, "get order", err, "the order could not be read")
		return
	}
	s.writeJSON(w, r, http.StatusOK, o)
}

func (s *System[TTx]) healthz(w http.ResponseWriter, r *http.Request) {
	var one int
	if err := s.db.Pool().QueryRow(r.Context(), `SELECT 1`).Scan(&one); err != nil {
		s.log.ErrorContext(r.Context(), "health check", "error", err)
		s.writeJSON(w, r, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "the database does not answer"})
		return
	}
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *System[TTx]) statsHandler(w http.ResponseWriter, r *http.Request) {
	st, err := s.Stats(r.Context())
	if err != nil {
		s.internalError(w, r, "stats", err, "the statistics could not be read")
		return
	}
	s.writeJSON(w, r, http.StatusOK, st)
}
