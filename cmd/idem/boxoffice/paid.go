package boxoffice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

// Paid orders: the saga flow of the box office, next to (not instead of) the
// POST /orders pipeline. A paid order reserves its seats, charges the
// customer at the payment provider (fakeprovider's payment API) and is
// confirmed, as the saga [SagaPaidOrder]:
//
//	POST /paid-orders ──(saga.StartTx, saga id = tenant + Idempotency-Key)──▶ paid_orders (pending) + first step scheduled (one tx)
//	reserve  (local)    takes the seats (event_inventory) and records the hold   │ undo: releases them
//	charge   (external) POST /charges, Idempotency-Key saga/<id>/charge/do       │ undo: POST /refunds, key …/charge/undo
//	confirm  (local)    paid_orders.status = confirmed, with the charge id
//	compensated ──▶ paid_orders.status = failed (Definition.OnDone)
//
// A declined charge (402) fails the step at once; a charge that keeps timing
// out fails after Config.MaxAttempts; either way the seats are released and
// the refund, keyed by the charge's own key, refunds it exactly once if it
// went through after all (or cancels the key at the provider if it did
// not). POST /paid-orders/{id}/cancel aborts a paid order that is still
// running. Duplicate requests with the same Idempotency-Key are the same
// saga (one order, one charge); the same key with another body is 422.

// SagaPaidOrder is the name of the paid-order saga.
const SagaPaidOrder = "paid-order"

// Paid-order statuses.
const (
	PaidPending   = "pending"   // the saga runs
	PaidConfirmed = "confirmed" // seats reserved, charged, confirmed
	PaidFailed    = "failed"    // compensated: seats released, charge refunded if made
)

// PaidOrder is a paid order as stored and answered by the API.
type PaidOrder struct {
	OrderID       string    `json:"order_id"`
	Tenant        string    `json:"tenant"`
	SagaID        string    `json:"saga_id"`
	EventID       string    `json:"event_id"`
	CustomerEmail string    `json:"customer_email"`
	Seats         int       `json:"seats"`
	TotalCents    int64     `json:"total_cents"`
	Currency      string    `json:"currency"`
	Status        string    `json:"status"`
	ChargeID      string    `json:"charge_id,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	SagaState     string    `json:"saga_state,omitempty"`
}

// SagaStep is one half (action or compensation) of a step of the
// paid-order saga, as [Hooks.WrapSagaStep] sees it.
type SagaStep func(ctx context.Context, c saga.Call) ([]byte, error)

// paidInput is the saga input: the order it works on.
type paidInput struct {
	OrderID string       `json:"order_id"`
	Request OrderRequest `json:"request"`
}

var paidNamespace = uuid.MustParse("5b2e3c1e-8d0a-4f53-9a55-0e7b3a9c1d42")

// paidSagaID is the saga id of a paid-order request: tenant and
// Idempotency-Key, so duplicate requests start one saga.
func paidSagaID(tenant, key string) string { return "paid:" + tenant + ":" + key }

func paidOrderID(sagaID string) string {
	return "ord_" + uuid.NewSHA1(paidNamespace, []byte(sagaID)).String()
}

// newSagas builds the paid-order saga on the system's ledger.
func (s *System[TTx]) newSagas() (*saga.Sagas[TTx], error) {
	orders, holds := s.t.paidOrders, s.t.seatHolds
	in := func(c saga.Call) (paidInput, error) {
		var p paidInput
		if err := json.Unmarshal(c.Input, &p); err != nil {
			return p, idem.Permanent(fmt.Errorf("boxoffice: paid-order input: %w", err))
		}
		return p, nil
	}
	client := &fakeprovider.Client{BaseURL: s.cfg.ProviderURL, Timeout: s.cfg.EffectCallTimeout,
		HTTPClient: &http.Client{Transport: &idemhttp.Transport{}}}
	wrap := func(step string, op saga.Op, f SagaStep) SagaStep {
		if s.cfg.Hooks.WrapSagaStep != nil {
			return s.cfg.Hooks.WrapSagaStep(step, op, f)
		}
		return f
	}
	def := saga.Definition[TTx]{
		Name: SagaPaidOrder,
		OnDone: func(ctx context.Context, tx TTx, sg saga.Saga) error {
			if sg.State != saga.Compensated {
				return nil
			}
			_, err := s.db.Tx(tx).Exec(ctx, `UPDATE `+orders+` SET status = $2 WHERE saga_id = $1 AND status = $3`, sg.ID, PaidFailed, PaidPending)
			return err
		},
		Steps: []saga.Step[TTx]{
			{
				Name: "reserve",
				DoTx: func(ctx context.Context, tx TTx, c saga.Call) ([]byte, error) {
					p, err := in(c)
					if err != nil {
						return nil, err
					}
					q := s.db.Tx(tx)
					if _, _, _, err := takeSeats(ctx, q, s.t, s.cfg.Seats, p.Request.EventID, int64(p.Request.Seats)); err != nil {
						if errors.Is(err, ErrSoldOut) {
							return nil, idem.Permanent(err)
						}
						return nil, err
					}
					if _, err := q.Exec(ctx, `INSERT INTO `+holds+` (order_id, event_id, seats, created_at) VALUES ($1, $2, $3, $4)`,
						p.OrderID, p.Request.EventID, p.Request.Seats, store.Micros(s.now())); err != nil {
						return nil, fmt.Errorf("boxoffice: seat hold: %w", err)
					}
					return json.Marshal(map[string]int{"seats": p.Request.Seats})
				},
				UndoTx: func(ctx context.Context, tx TTx, c saga.Call) ([]byte, error) {
					p, err := in(c)
					if err != nil {
						return nil, err
					}
					q := s.db.Tx(tx)
					n, err := q.Exec(ctx, `UPDATE `+holds+` SET released = 1, released_at = $2 WHERE order_id = $1 AND released = 0`, p.OrderID, store.Micros(s.now()))
					if err != nil || n == 0 {
						return nil, err
					}
					_, err = q.Exec(ctx, `UPDATE `+s.t.inventory+` SET sold = sold - $2, version = version + 1 WHERE event_id = $1`,
						p.Request.EventID, p.Request.Seats)
					return nil, err
				},
			},
			{
				Name: "charge",
				Do: wrap("charge", saga.Do, func(ctx context.Context, c saga.Call) ([]byte, error) {
					p, err := in(c)
					if err != nil {
						return nil, err
					}
					r, err := client.Charge(ctx, c.Key, fakeprovider.ChargeRequest{Amount: p.Request.TotalCents, Currency: p.Request.Currency, Reference: p.OrderID})
					if err != nil {
						return nil, err
					}
					return json.Marshal(r)
				}),
				Undo: wrap("charge", saga.Undo, func(ctx context.Context, c saga.Call) ([]byte, error) {
					r, err := client.Refund(ctx, c.Key, c.DoKey)
					if err != nil {
						return nil, err
					}
					return json.Marshal(r)
				}),
			},
			{
				Name: "confirm",
				DoTx: func(ctx context.Context, tx TTx, c saga.Call) ([]byte, error) {
					p, err := in(c)
					if err != nil {
						return nil, err
					}
					var ch fakeprovider.ChargeResult
					if err := json.Unmarshal(c.Results["charge"], &ch); err != nil || ch.ID == "" {
						return nil, idem.Permanent(fmt.Errorf("boxoffice: no charge to confirm order %s", p.OrderID))
					}
					_, err = s.db.Tx(tx).Exec(ctx, `UPDATE `+orders+` SET status = $2, charge_id = $3 WHERE order_id = $1 AND status = $4`,
						p.OrderID, PaidConfirmed, ch.ID, PaidPending)
					return nil, err
				},
			},
		},
	}
	return saga.New(s.db, s.ledger, saga.Config{Now: s.cfg.Now, Logger: s.cfg.Logger}, def)
}

// sagaWorker runs the paid-order steps (with RoleEffects).
func (s *System[TTx]) sagaWorker() (*saga.Worker[TTx], error) {
	return saga.NewWorker(s.sagas, saga.WorkerConfig[TTx]{
		Effect: effect.WorkerConfig[TTx]{
			Concurrency:  16,
			PollInterval: s.cfg.PollInterval,
			MaxAttempts:  s.cfg.MaxAttempts,
			Backoff:      effect.FullJitter(s.cfg.RetryBase, s.cfg.RetryMax),
			Logger:       s.cfg.Logger,
			// A compensation that cannot be made (exhausted) is parked in
			// the dead-letter store with its key, and the saga is held.
			OnFailed: func(ctx context.Context, tx TTx, e effect.Effect, cause error) error {
				_, err := s.dlq.ParkTx(ctx, tx, dlqLetter(e, cause))
				return err
			},
		},
		UndoMaxAttempts: max(4*s.cfg.MaxAttempts, 10),
	})
}

// Sagas returns the paid-order sagas (start, read, abort).
func (s *System[TTx]) Sagas() *saga.Sagas[TTx] { return s.sagas }

// StartPaidOrderTx records the paid order of tenant under the request key
// and starts its saga inside tx. A duplicate (same tenant, key and request)
// returns the stored order and created false; the same key with another
// request fails with an error matching saga.ErrMismatch.
func (s *System[TTx]) StartPaidOrderTx(ctx context.Context, tx TTx, tenant, key string, req OrderRequest) (PaidOrder, bool, error) {
	id := paidSagaID(tenant, key)
	o := PaidOrder{OrderID: paidOrderID(id), Tenant: tenant, SagaID: id, EventID: req.EventID, CustomerEmail: req.CustomerEmail,
		Seats: req.Seats, TotalCents: req.TotalCents, Currency: req.Currency, Status: PaidPending, CreatedAt: store.FromMicros(store.Micros(s.now()))}
	input, _ := json.Marshal(paidInput{OrderID: o.OrderID, Request: req})
	_, created, err := s.sagas.StartTx(ctx, tx, SagaPaidOrder, id, input)
	if err != nil || !created {
		if err == nil {
			o, err = s.getPaidOrder(ctx, s.db.Tx(tx), tenant, o.OrderID)
		}
		return o, false, err
	}
	orders := s.t.paidOrders
	if _, err := s.db.Tx(tx).Exec(ctx, `INSERT INTO `+orders+` (order_id, tenant, saga_id, event_id, customer_email, seats, total_cents, currency, status, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, o.OrderID, o.Tenant, o.SagaID, o.EventID, o.CustomerEmail, o.Seats, o.TotalCents,
		o.Currency, o.Status, store.Micros(o.CreatedAt)); err != nil {
		return o, false, fmt.Errorf("boxoffice: insert paid order: %w", err)
	}
	return o, true, nil
}

func (s *System[TTx]) getPaidOrder(ctx context.Context, q store.Querier, tenant, id string) (PaidOrder, error) {
	orders := s.t.paidOrders
	var o PaidOrder
	var created int64
	err := q.QueryRow(ctx, `SELECT order_id, tenant, saga_id, event_id, customer_email, seats, total_cents, currency, status, charge_id, created_at
		FROM `+orders+` WHERE order_id = $1 AND tenant = $2`, id, tenant).Scan(&o.OrderID, &o.Tenant, &o.SagaID, &o.EventID,
		&o.CustomerEmail, &o.Seats, &o.TotalCents, &o.Currency, &o.Status, &o.ChargeID, &created)
	o.CreatedAt = store.FromMicros(created)
	return o, err
}

// createPaidOrder is POST /paid-orders. It needs an Idempotency-Key (the
// saga's business key) and runs without the idempotency middleware: the
// saga start itself is idempotent, so racing duplicates all answer the one
// order (201 for the request that created it, 200 for the others).
func (s *System[TTx]) createPaidOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := r.Header.Get("Idempotency-Key")
	if err := checks.ID(key); err != nil || len(key) > 128 {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidRequest, "Invalid paid order", "send an Idempotency-Key of 1-128 printable bytes")
		return
	}
	req, ok := readOrderRequest(w, r)
	if !ok {
		return
	}
	var (
		o       PaidOrder
		created bool
	)
	err := store.InTx(ctx, s.db, func(tx TTx) error {
		var err error
		o, created, err = s.StartPaidOrderTx(ctx, tx, tenantOf(r), key, req)
		return err
	})
	if errors.Is(err, saga.ErrMismatch) {
		writeProblem(w, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused, "Idempotency-Key reused",
			"this Idempotency-Key started a paid order with another body")
		return
	}
	if err != nil {
		s.internalError(w, r, "create paid order", err, "the paid order was not created; retry with the same Idempotency-Key")
		return
	}
	w.Header().Set("Location", "/paid-orders/"+o.OrderID)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	s.writeJSON(w, r, status, o)
}

// paidOrderOf reads the paid order named by the path for the request's
// tenant, answering 404 or 500 (and false) when it cannot.
func (s *System[TTx]) paidOrderOf(w http.ResponseWriter, r *http.Request) (PaidOrder, bool) {
	id, tenant := r.PathValue("id"), tenantOf(r)
	if !ValidOrderID(id) {
		writeProblem(w, http.StatusNotFound, ProblemNotFound, "Order not found", "not an order id (ord_ and a UUID)")
		return PaidOrder{}, false
	}
	o, err := s.getPaidOrder(r.Context(), s.db.Pool(), tenant, id)
	if errors.Is(err, store.ErrNoRows) {
		writeProblem(w, http.StatusNotFound, ProblemNotFound, "Order not found", "no paid order "+id+" for tenant "+tenant)
		return o, false
	}
	if err != nil {
		s.internalError(w, r, "get paid order", err, "the order could not be read")
		return o, false
	}
	return o, true
}

// getPaidOrderHandler is GET /paid-orders/{id}, with the saga's state.
func (s *System[TTx]) getPaidOrderHandler(w http.ResponseWriter, r *http.Request) {
	o, ok := s.paidOrderOf(w, r)
	if !ok {
		return
	}
	if sg, err := s.sagas.Get(r.Context(), o.SagaID); err == nil {
		o.SagaState = string(sg.State)
	}
	s.writeJSON(w, r, http.StatusOK, o)
}

// cancelPaidOrder is POST /paid-orders/{id}/cancel: it aborts the saga
// (202) while it runs; a finished one answers 409.
func (s *System[TTx]) cancelPaidOrder(w http.ResponseWriter, r *http.Request) {
	o, ok := s.paidOrderOf(w, r)
	if !ok {
		return
	}
	err := s.sagas.Abort(r.Context(), o.SagaID, "cancelled by the customer")
	if errors.Is(err, saga.ErrNotRunning) {
		writeProblem(w, http.StatusConflict, ProblemNotCancellable, "Order not cancellable", "the order is already "+o.Status+" or being compensated")
		return
	}
	if err != nil {
		s.internalError(w, r, "cancel paid order", err, "the order was not cancelled; retry")
		return
	}
	s.writeJSON(w, r, http.StatusAccepted, map[string]string{"order_id": o.OrderID, "status": "cancelling"})
}

// ProblemNotCancellable: the paid order finished or is compensating (409).
const ProblemNotCancellable = problemBase + "ProblemNotCancellable"

// PaidFacts are what the saga drills check for the paid orders, read from
// the database.
type PaidFacts struct {
	Orders, Confirmed, Failed, Pending int64
	ConfirmedCents                     int64
	// Holds maps an order id to its seat hold: released or not.
	Holds map[string]bool
	// Status maps an order id to its status.
	Status map[string]string
	// Sagas counts the paid-order sagas per state.
	Sagas map[saga.State]int64
}

// PaidFacts reads the paid orders, their seat holds and their sagas.
func (s *System[TTx]) PaidFacts(ctx context.Context) (PaidFacts, error) {
	orders, holds := s.t.paidOrders, s.t.seatHolds
	f := PaidFacts{Holds: map[string]bool{}, Status: map[string]string{}}
	q := s.db.Pool()
	rows, err := q.Query(ctx, `SELECT order_id, status, total_cents FROM `+orders)
	if err != nil {
		return f, err
	}
	for rows.Next() {
		var id, st string
		var cents int64
		if err := rows.Scan(&id, &st, &cents); err != nil {
			rows.Close()
			return f, err
		}
		f.Orders++
		f.Status[id] = st
		switch st {
		case PaidConfirmed:
			f.Confirmed++
			f.ConfirmedCents += cents
		case PaidFailed:
			f.Failed++
		default:
			f.Pending++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return f, err
	}
	rows, err = q.Query(ctx, `SELECT order_id, released FROM `+holds)
	if err != nil {
		return f, err
	}
	for rows.Next() {
		var id string
		var rel int64
		if err := rows.Scan(&id, &rel); err != nil {
			rows.Close()
			return f, err
		}
		f.Holds[id] = rel != 0
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return f, err
	}
	f.Sagas, err = s.sagas.Counts(ctx)
	return f, err
}

// dlqLetter is the dead letter of a compensation that could not be made.
func dlqLetter(e effect.Effect, cause error) dlq.Letter {
	return dlq.Letter{Consumer: "saga:" + SagaPaidOrder, Source: e.Kind, MessageID: e.Key, Payload: e.Payload,
		Error: cause.Error(), ErrorClass: idem.ErrorClass(cause), Attempts: e.Attempts}
}
