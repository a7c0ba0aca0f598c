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
	// Effects held for reconciliation (migration 0009, effect.WithKeyLifetime)
	// count as state "held" rather than in_progress.
	effectState := "state"
	if ok, err := hasColumn(ctx, q, d.Dialect(), d.Names(), "effects", "held_at"); err != nil {
		return st, err
	} else if ok {
		effectState = heldState
	}
	if st.Effects, _, err = group("effects", effectState, ""); err != nil {
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

// heldState is the effects' state with held effects as "held".
const heldState = `CASE WHEN held_at > 0 AND state = 'in_progress' THEN 'held' ELSE state END`

// hasColumn reports whether idem's table name has column col (a column a
// later migration added).
func hasColumn(ctx context.Context, q store.Querier, d store.Dialect, names store.Names, name, col string) (bool, error) {
	var n int64
	var err error
	switch d {
	case store.Postgres:
		err = q.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`,
			names.Schema, name, col).Scan(&n)
	default:
		err = q.QueryRow(ctx, `SELECT count(*) FROM pragma_table_info($1) WHERE name = $2`, names.Prefix+name, col).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("stats: column %s.%s: %w", name, col, err)
	}
	return n > 0, nil
}
