package boxoffice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/store"
)

// Stats is the body of GET /stats. Business counts come from the database
// (so they include the work of every process sharing it); the e-mail
// counts come from the provider; duplicates_suppressed counts what this
// process's components suppressed since it started.
type Stats struct {
	Orders          int64 `json:"orders"`           // rows in orders
	EventsPublished int64 `json:"events_published"` // outbox events the relay published (until pruned; operator.OutboxCounts)
	Notifications   int64 `json:"notifications"`    // OrderConfirmed events the notification consumer recorded (its inbox records; operator.InboxCountsByConsumer)
	EmailsScheduled int64 `json:"emails_scheduled"` // e-mail effects in the ledger (operator.EffectCountsByKind)
	EmailsSent      int64 `json:"emails_sent"`      // unique effects at the provider
	ProviderCalls   int64 `json:"provider_calls"`   // raw calls the provider received
	Invoices        int64 `json:"invoices"`         // rows in invoices
	Payments        int64 `json:"payments"`         // paid orders
	// SeatsLeft is the search projection: seats left per event.
	SeatsLeft map[string]int64 `json:"seats_left"`
	// DeadLetters is the number of parked dead letters (operator.DLQCountParked).
	DeadLetters int64 `json:"dead_letters"`
	// DuplicatesSuppressed per component: http (replayed responses),
	// broker (publishes the broker dropped as duplicates), notification,
	// billing, search (inbox duplicates), webhook (replayed deliveries),
	// provider (calls answered from the provider's idempotency record).
	DuplicatesSuppressed map[string]int64 `json:"duplicates_suppressed"`
}

// Stats gathers the numbers of GET /stats.
func (s *System[TTx]) Stats(ctx context.Context) (Stats, error) {
	st := Stats{SeatsLeft: map[string]int64{}, DuplicatesSuppressed: map[string]int64{}}
	q := s.db.Pool()
	// The business tables are the boxoffice's own; idem's tables are
	// counted by their owners.
	counts := []struct {
		dst   *int64
		table string
	}{
		{&st.Orders, s.t.orders},
		{&st.Invoices, s.t.invoices},
		{&st.Payments, s.t.payments},
	}
	for _, c := range counts {
		if err := q.QueryRow(ctx, `SELECT count(*) FROM `+c.table).Scan(c.dst); err != nil {
			return st, fmt.Errorf("boxoffice: stats: %w", err)
		}
	}
	byConsumer, err := operator.InboxCountsByConsumer(ctx, s.db)
	if err != nil {
		return st, fmt.Errorf("boxoffice: stats: %w", err)
	}
	st.Notifications = byConsumer[ConsumerNotification]
	byKind, err := operator.EffectCountsByKind(ctx, s.db)
	if err != nil {
		return st, fmt.Errorf("boxoffice: stats: %w", err)
	}
	st.EmailsScheduled = byKind[EffectKindEmail]
	published, err := operator.OutboxCounts(ctx, s.db)
	if err != nil {
		return st, fmt.Errorf("boxoffice: stats: %w", err)
	}
	st.EventsPublished = published[lease.Completed]
	parked, err := operator.DLQCountParked(ctx, s.db)
	if err != nil {
		return st, fmt.Errorf("boxoffice: stats: %w", err)
	}
	for _, n := range parked {
		st.DeadLetters += n
	}
	rows, err := q.Query(ctx, `SELECT event_id, seats_left FROM `+s.t.availability)
	if err != nil {
		return st, fmt.Errorf("boxoffice: stats: %w", err)
	}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return st, err
		}
		st.SeatsLeft[id] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	calls, unique, err := s.providerStats(ctx)
	if err != nil {
		return st, err
	}
	st.ProviderCalls, st.EmailsSent = calls, unique
	d := st.DuplicatesSuppressed
	d["http"] = s.counts.http.Load()
	d["broker"] = s.counts.brokerDup.Load()
	d["webhook"] = s.counts.webhook.Load()
	for _, c := range consumerNames {
		d[c] = s.metrics.DuplicateCount("consumer", c)
	}
	d["provider"] = max(calls-unique, 0)
	return st, nil
}

// providerStats returns the provider's raw calls and unique effects: from
// the in-process provider when [Open] started one, otherwise from the
// provider's GET /stats.
func (s *System[TTx]) providerStats(ctx context.Context) (calls, unique int64, err error) {
	if s.provider != nil {
		return int64(s.provider.Calls()), int64(s.provider.UniqueEffects()), nil
	}
	if s.cfg.ProviderURL == "" {
		return 0, 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.ProviderURL+"/stats", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("boxoffice: provider stats: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		Calls         int64 `json:"calls"`
		UniqueEffects int64 `json:"unique_effects"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, 0, fmt.Errorf("boxoffice: provider stats: %w", err)
	}
	return v.Calls, v.UniqueEffects, nil
}

// OrderTimes is when one order passed each stage of its path through the
// system, in microseconds since the Unix epoch by the system's clock
// (Config.Now); 0 means the order has not reached the stage yet.
type OrderTimes struct {
	OrderID string
	// Accepted is the order's created_at (its transaction, which also
	// enqueued the OrderConfirmed event, committed shortly after).
	Accepted int64
	// Published is when the relay marked the event published (after the
	// broker's ack).
	Published int64
	// Notified is when the notification consumer recorded the event in
	// its inbox (the transaction that also scheduled the e-mail).
	Notified int64
	// Scheduled is the e-mail effect's created_at in the ledger.
	Scheduled int64
	// Sent is when the effect worker recorded the e-mail completed (after
	// the provider's answer).
	Sent int64
	// Invoiced is the invoice's created_at.
	Invoiced int64
}

// OrderTimeline returns the stage times of every order whose
// OrderConfirmed event is still in the outbox (published events are kept
// until pruned), for instrumentation: where the confirmation e-mails wait
// (bench --soak reports the lags between stages). It changes no row; on
// PostgreSQL it first analyses the tables it joins (their statistics).
func (s *System[TTx]) OrderTimeline(ctx context.Context) ([]OrderTimes, error) {
	d, n := s.db.Dialect(), s.db.Names()
	q := `SELECT o.order_id, o.created_at, x.published_at, COALESCE(i.processed_at, 0), COALESCE(e.created_at, 0),
		CASE WHEN e.state = 'completed' THEN e.completed_at ELSE 0 END, COALESCE(v.created_at, 0)
	FROM ` + n.Table(d, "outbox") + ` x
	JOIN ` + s.t.orders + ` o ON o.order_id = x.ce_subject
	LEFT JOIN ` + n.Table(d, "inbox") + ` i ON i.consumer = $1 AND i.message_id = x.event_id AND i.state = 'completed'
	LEFT JOIN ` + s.t.emails + ` m ON m.order_id = o.order_id AND m.kind = $2
	LEFT JOIN ` + n.Table(d, "effects") + ` e ON e.effect_key = m.effect_key
	LEFT JOIN ` + s.t.invoices + ` v ON v.order_id = o.order_id
	WHERE x.type = $3`
	if d == store.Postgres {
		// A soak fills these tables in a minute, before autovacuum has
		// analysed them: without statistics the planner nested a loop over
		// the inbox and the query ran for minutes at 90,000 orders.
		if _, err := s.db.Pool().Exec(ctx, `ANALYZE `+n.Table(d, "outbox")+`, `+s.t.orders+`, `+n.Table(d, "inbox")+`, `+
			s.t.emails+`, `+n.Table(d, "effects")+`, `+s.t.invoices); err != nil {
			return nil, fmt.Errorf("boxoffice: order timeline: analyze: %w", err)
		}
	}
	rows, err := s.db.Pool().Query(ctx, q, ConsumerNotification, EmailKindConfirmation, EventTypeOrderConfirmed)
	if err != nil {
		return nil, fmt.Errorf("boxoffice: order timeline: %w", err)
	}
	defer rows.Close()
	var out []OrderTimes
	for rows.Next() {
		var t OrderTimes
		if err := rows.Scan(&t.OrderID, &t.Accepted, &t.Published, &t.Notified, &t.Scheduled, &t.Sent, &t.Invoiced); err != nil {
			return nil, fmt.Errorf("boxoffice: order timeline: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("boxoffice: order timeline: %w", err)
	}
	return out, nil
}
