package idemmetrics

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/store"
)

// Stats is an exact snapshot of idem's tables in one database, the numbers
// `idem stats` prints. Sections of tables that do not exist yet are empty
// and listed in TablesMissing.
type Stats struct {
	Inbox       Counts      `json:"inbox"`               // rows by consumer
	HTTPKeys    Counts      `json:"http_keys"`           // rows by state
	Outbox      OutboxStats `json:"outbox"`              // events by state + lag
	Effects     Counts      `json:"effects"`             // rows by state
	DeadLetters Counts      `json:"dead_letters"`        // rows by state
	DeadParked  Counts      `json:"dead_letters_parked"` // parked letters by consumer
	// DeadNoID counts, by consumer, the parked letters of messages that
	// came without a usable message id (message id dlq.NoIDPrefix…): set
	// that consumer's consumer.Config.MessageID.
	DeadNoID      Counts        `json:"dead_letters_parked_no_id"`
	TablesMissing []string      `json:"tables_missing,omitempty"`
	TakenAt       time.Time     `json:"taken_at"`
	Took          time.Duration `json:"-"`
}

// Counts is a total and its breakdown (by consumer or by state).
type Counts struct {
	Total int64            `json:"total"`
	By    map[string]int64 `json:"by"`
}

// OutboxStats counts outbox events by state; LagSeconds is the age of the
// oldest pending event (0 when none).
type OutboxStats struct {
	Pending    int64   `json:"pending"`
	Published  int64   `json:"published"`
	Parked     int64   `json:"parked"`
	LagSeconds float64 `json:"lag_seconds"`
}

// Snapshot reads Stats from d with exact counts (the tables' owners count
// with count(*) … GROUP BY): on very large tables prefer the row estimates
// of [NewDBCollector].
func Snapshot[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time) (Stats, error) {
	t0 := time.Now()
	st := Stats{TakenAt: now.UTC(), Inbox: countsOf(nil), HTTPKeys: countsOf(nil), Effects: countsOf(nil),
		DeadLetters: countsOf(nil), DeadParked: countsOf(nil), DeadNoID: countsOf(nil)}
	// section fills one table's part of st when the table exists.
	section := func(name string, fill func() error) error {
		ok, err := sqlmeta.TableExists(ctx, d, name)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		if !ok {
			st.TablesMissing = append(st.TablesMissing, name)
			return nil
		}
		if err := fill(); err != nil {
			return fmt.Errorf("stats: %s: %w", name, err)
		}
		return nil
	}
	sections := []struct {
		name string
		fill func() error
	}{
		{"inbox", func() error {
			by, err := operator.InboxCountsByConsumer(ctx, d)
			st.Inbox = countsOf(by)
			return err
		}},
		{"idempotency_keys", func() error {
			by, err := operator.HTTPKeyCounts(ctx, d)
			st.HTTPKeys = countsOf(by)
			return err
		}},
		{"outbox", func() error {
			by, err := operator.OutboxCounts(ctx, d)
			if err != nil {
				return err
			}
			// The JSON keeps its names: published is the completed state,
			// parked the failed one (migration 0010).
			st.Outbox = OutboxStats{Pending: by[lease.Pending], Published: by[lease.Completed], Parked: by[lease.Failed]}
			b, err := operator.OutboxBacklog(ctx, d, now)
			st.Outbox.LagSeconds = b.Oldest.Seconds()
			return err
		}},
		{"effects", func() error {
			by, err := operator.EffectCounts(ctx, d)
			if err != nil {
				return err
			}
			// Effects held for reconciliation (effect.WithKeyLifetime)
			// count as state "held" rather than in_progress.
			held, err := operator.EffectCountHeld(ctx, d)
			if n := total(held); n > 0 {
				by["held"] = n
				if by[lease.InProgress] -= n; by[lease.InProgress] <= 0 {
					delete(by, lease.InProgress)
				}
			}
			st.Effects = countsOf(by)
			return err
		}},
		{"dead_letters", func() error {
			by, err := operator.DLQCounts(ctx, d)
			if err != nil {
				return err
			}
			st.DeadLetters = countsOf(by)
			if by, err = operator.DLQCountParked(ctx, d); err != nil {
				return err
			}
			st.DeadParked = countsOf(by)
			by, err = operator.DLQCountParkedNoID(ctx, d)
			st.DeadNoID = countsOf(by)
			return err
		}},
	}
	for _, s := range sections {
		if err := section(s.name, s.fill); err != nil {
			return st, err
		}
	}
	st.Took = time.Since(t0)
	return st, nil
}
