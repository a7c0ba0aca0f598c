package boxoffice

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/idemkit/idem/store"
)

// Order statuses.
const (
	StatusConfirmed = "confirmed" // created; OrderConfirmed enqueued
	StatusPaid      = "paid"      // the payment webhook arrived
)

// EventTypeOrderConfirmed is the CloudEvents type of the event the order API
// enqueues with every new order.
const EventTypeOrderConfirmed = "OrderConfirmed"

// Subject is the broker subject the relay publishes order events to.
const Subject = "order-events"

// EmailKindConfirmation is the kind of the confirmation e-mail; the
// outgoing_emails table holds at most one row per (order_id, kind).
const EmailKindConfirmation = "order-confirmation"

// OrderRequest is the body of POST /orders.
type OrderRequest struct {
	EventID       string `json:"event_id"`
	CustomerEmail string `json:"customer_email"`
	Seats         int    `json:"seats"`
	TotalCents    int64  `json:"total_cents"`
	Currency      string `json:"currency"`
}

// Order is an order as stored and as answered by the API.
type Order struct {
	OrderID       string    `json:"order_id"`
	Tenant        string    `json:"tenant"`
	EventID       string    `json:"event_id"`
	CustomerEmail string    `json:"customer_email"`
	Seats         int       `json:"seats"`
	TotalCents    int64     `json:"total_cents"`
	Currency      string    `json:"currency"`
	Status        string    `json:"status"`
	CreatedAt     time.Time `json:"created_at"`
}

// OrderConfirmed is the payload of the OrderConfirmed event: the order plus
// the event's seats left after it, versioned by the number of orders the
// event has taken (the search projection applies it through the version
// guard, so an older availability never overwrites a newer one).
type OrderConfirmed struct {
	Order
	SeatsLeft    int64 `json:"seats_left"`
	EventVersion int64 `json:"event_version"`
}

// ValidationError is a request that can never succeed as sent (HTTP 400).
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// ErrSoldOut reports that the event has fewer seats left than requested.
var ErrSoldOut = errors.New("boxoffice: sold out")

var (
	tenantRe   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	currencyRe = regexp.MustCompile(`^[A-Za-z]{3}$`)
	eventIDRe  = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
)

// ValidOrderID reports whether id has the form of an order id: "ord_"
// followed by a UUID in its canonical lower-case 36-character form (what
// the order API assigns). Anything else is no order, checked before a
// query so that client bytes the database rejects (NUL, invalid UTF-8)
// never reach it.
func ValidOrderID(id string) bool {
	rest, ok := strings.CutPrefix(id, "ord_")
	if !ok || len(rest) != 36 {
		return false
	}
	u, err := uuid.Parse(rest)
	return err == nil && u.String() == rest
}

// DefaultTenant is the tenant of requests without X-Tenant-ID.
const DefaultTenant = "public"

// ParseTenant validates an X-Tenant-ID value: absent means [DefaultTenant];
// otherwise 1–64 characters of [A-Za-z0-9_-].
func ParseTenant(v string, present bool) (string, error) {
	if !present {
		return DefaultTenant, nil
	}
	if !tenantRe.MatchString(v) {
		return "", &ValidationError{Field: "X-Tenant-ID", Reason: "must be 1-64 characters of [A-Za-z0-9_-]"}
	}
	return v, nil
}

// DecodeOrderRequest parses and validates a POST /orders body.
func DecodeOrderRequest(body []byte) (OrderRequest, error) {
	var req OrderRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if !utf8.Valid(body) { // encoding/json would quietly turn the bad bytes into U+FFFD
		return req, &ValidationError{Reason: "body must be UTF-8"}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return req, &ValidationError{Reason: "body must be a JSON object: " + err.Error()}
	}
	for _, f := range []string{"event_id", "customer_email", "seats", "total_cents", "currency"} {
		if _, ok := raw[f]; !ok {
			return req, &ValidationError{Field: f, Reason: "is required"}
		}
	}
	if err := dec.Decode(&req); err != nil {
		return req, &ValidationError{Reason: "invalid body: " + err.Error()}
	}
	if dec.More() {
		return req, &ValidationError{Reason: "body must hold exactly one JSON object"}
	}
	if !eventIDRe.MatchString(req.EventID) {
		return req, &ValidationError{Field: "event_id", Reason: "must be 1-64 characters of [A-Za-z0-9_.:-]"}
	}
	if !plainEmail(req.CustomerEmail) {
		return req, &ValidationError{Field: "customer_email", Reason: "must be a plain e-mail address"}
	}
	if req.Seats < 1 || req.Seats > 10 {
		return req, &ValidationError{Field: "seats", Reason: "must be between 1 and 10"}
	}
	if req.TotalCents <= 0 {
		return req, &ValidationError{Field: "total_cents", Reason: "must be a positive integer"}
	}
	if !currencyRe.MatchString(req.Currency) {
		return req, &ValidationError{Field: "currency", Reason: "must be 3 letters"}
	}
	req.Currency = strings.ToUpper(req.Currency)
	return req, nil
}

// plainEmail reports whether s is a bare address (no display name) of at
// most 254 bytes.
func plainEmail(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && a.Address == s && len(s) <= 254
}

// createOrderTx takes the seats and inserts the order inside tx; it returns
// the order and the event payload to enqueue in the same transaction.
// ErrSoldOut leaves the inventory unchanged.
func createOrderTx(ctx context.Context, q store.Querier, t tables, seats int64, tenant string, req OrderRequest, now time.Time) (OrderConfirmed, error) {
	var oc OrderConfirmed
	id, err := uuid.NewV7()
	if err != nil {
		return oc, err
	}
	capacity, sold, version, err := takeSeats(ctx, q, t, seats, req.EventID, int64(req.Seats))
	if err != nil {
		return oc, err
	}
	o := Order{
		OrderID:       "ord_" + id.String(),
		Tenant:        tenant,
		EventID:       req.EventID,
		CustomerEmail: req.CustomerEmail,
		Seats:         req.Seats,
		TotalCents:    req.TotalCents,
		Currency:      req.Currency,
		Status:        StatusConfirmed,
		CreatedAt:     store.FromMicros(store.Micros(now)),
	}
	if _, err := q.Exec(ctx, `INSERT INTO `+t.orders+` (order_id, tenant, event_id, customer_email, seats, total_cents, currency, status, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		o.OrderID, o.Tenant, o.EventID, o.CustomerEmail, o.Seats, o.TotalCents, o.Currency, o.Status, store.Micros(o.CreatedAt)); err != nil {
		return oc, fmt.Errorf("boxoffice: insert order: %w", err)
	}
	return OrderConfirmed{Order: o, SeatsLeft: capacity - sold, EventVersion: version}, nil
}

// takeSeats takes n seats of event (capacity seats, the inventory row
// created on first use) inside the caller's transaction, or returns
// ErrSoldOut changing nothing. The conditional increment is the whole
// sold-out decision (row lock on PostgreSQL, the write lock on SQLite).
func takeSeats(ctx context.Context, q store.Querier, t tables, seats int64, event string, n int64) (capacity, sold, version int64, err error) {
	ensure := insertOrSkip(t.dialect, `INSERT INTO `+t.inventory+` (event_id, capacity, sold, version)
		VALUES ($1, $2, 0, 0)`, `(event_id)`)
	if isMySQL(t.dialect) {
		// ON DUPLICATE KEY takes the row's exclusive lock at once: an
		// INSERT skipping the duplicate would hold a shared lock, and two
		// orders upgrading theirs for the UPDATE would deadlock.
		ensure = `INSERT INTO ` + t.inventory + ` (event_id, capacity, sold, version)
		VALUES ($1, $2, 0, 0) ON DUPLICATE KEY UPDATE event_id = event_id`
	}
	if _, err := q.Exec(ctx, ensure, event, seats); err != nil {
		return 0, 0, 0, fmt.Errorf("boxoffice: inventory: %w", err)
	}
	err = q.QueryRow(ctx, updateReturning(t.dialect, `UPDATE `+t.inventory+` SET sold = sold + $2, version = version + 1
		WHERE event_id = $1 AND sold + $2 <= capacity`, `capacity, sold, version`, t.inventory, `event_id = $1`), event, n).Scan(&capacity, &sold, &version)
	if errors.Is(err, store.ErrNoRows) {
		return 0, 0, 0, ErrSoldOut
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("boxoffice: inventory: %w", err)
	}
	return capacity, sold, version, nil
}

const orderColumns = `order_id, tenant, event_id, customer_email, seats, total_cents, currency, status, created_at`

func scanOrder(row store.Row) (Order, error) {
	var o Order
	var created int64
	err := row.Scan(&o.OrderID, &o.Tenant, &o.EventID, &o.CustomerEmail, &o.Seats, &o.TotalCents, &o.Currency, &o.Status, &created)
	o.CreatedAt = store.FromMicros(created)
	return o, err
}

// getOrder returns the order id of tenant; another tenant's order is
// store.ErrNoRows, exactly like a missing one.
func getOrder(ctx context.Context, q store.Querier, t tables, tenant, id string) (Order, error) {
	return scanOrder(q.QueryRow(ctx, `SELECT `+orderColumns+` FROM `+t.orders+` WHERE order_id = $1 AND tenant = $2`, id, tenant))
}
