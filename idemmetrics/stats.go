package idemmetrics

import (
	"context"
	"fmt"
	"time"

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

// Snapshot reads Stats from d with exact counts (count(*) … GROUP BY): on
// very large tables prefer the row estimates of [NewDBCollector].
func Snapshot[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time) (Stats, error) {
	t0 := time.Now()
	st := Stats{TakenAt: now.UTC()}
	q := d.Pool()
	group := func(name, col, where string) (Counts, bool, error) {
		c := Counts{By: map[string]int64{}}
		ok, err := sqlmeta.Exists(ctx, q, d.Dialect(), d.Names(), name)
		if err != nil || !ok {
			if err == nil {
				st.TablesMissing = append(st.TablesMissing, name)
			}
			return c, ok, err
		}
		rows, err := q.Query(ctx, `SELECT `+col+`, count(*) FROM `+d.Table(name)+where+` GROUP BY `+col+` ORDER BY `+col)
		if err != nil {
			return c, ok, fmt.Errorf("stats: %s: %w", name, err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				return c, ok, err
			}
			c.By[k] = n
			c.Total += n
		}
		return c, ok, rows.Err()
	}
	var err error
	if st.Inbox, _, err = group("inbox", "consumer", ""); err != nil {
		return st, err
	}
	if st.HTTPKeys, _, err = group("idempotency_keys", "state", ""); err != nil {
		return st, err
	}
	outbox, ok, err := group("outbox", "state", "")
	if err != nil {
		return st, err
	}
	if ok {
		st.Outbox = OutboxStats{Pending: outbox.By["pending"], Published: outbox.By["published"], Parked: outbox.By["parked"]}
		lag, _, err := outboxLag(ctx, q, d.Table("outbox"), now)
		if err != nil {
			return st, err
		}
		st.Outbox.LagSeconds = lag.Seconds()
	}
	if st.Effects, _, err = group("effects", "state", ""); err != nil {
		return st, err
	}
	if st.DeadLetters, ok, err = group("dead_letters", "state", ""); err != nil {
		return st, err
	}
	st.DeadParked = Counts{By: map[string]int64{}}
	st.DeadNoID = Counts{By: map[string]int64{}}
	if ok {
		if st.DeadParked, _, err = group("dead_letters", "consumer", ` WHERE state = 'parked'`); err != nil {
			return st, err
		}
		// 'no-id:' is dlq.NoIDPrefix (idemmetrics_test checks they agree).
		if st.DeadNoID, _, err = group("dead_letters", "consumer", ` WHERE state = 'parked' AND substr(message_id, 1, 6) = 'no-id:'`); err != nil {
			return st, err
		}
	}
	st.Took = time.Since(t0)
	return st, nil
}
