package idemmetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/store"
)

// Tables lists idem's tables that stats and row estimates cover, in the
// order of their migrations.
var Tables = []string{"inbox", "idempotency_keys", "outbox", "effects", "dead_letters"}

// DBConfig tunes NewDBCollector.
type DBConfig struct {
	// Timeout bounds the queries of one scrape. Defaults to 5s.
	Timeout time.Duration
	// Now returns the current time (outbox lag). Defaults to time.Now.
	Now func() time.Time
	// Logger receives scrape errors. Defaults to discarding.
	Logger *slog.Logger
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
}

// dbCollector computes gauges from the database at scrape time.
type dbCollector struct {
	dialect store.Dialect
	names   store.Names
	table   func(string) string
	pool    store.Querier
	cfg     DBConfig

	parked, lag, pending, rows, held *prometheus.Desc
}

// NewDBCollector returns a collector that queries d on every scrape:
//
//	idem_dead_letters_parked (consumer)  parked dead letters (alert when > 0)
//	idem_outbox_lag_seconds              age of the oldest unpublished (pending) outbox event, 0 when none
//	idem_outbox_pending                  pending outbox events
//	idem_table_rows (table)              row estimate of each idem table (pg_class.reltuples; count(*) on SQLite)
//	idem_effects_held (kind)             effects held for reconciliation (provider key lifetime exceeded; alert when > 0)
//
// Tables that do not exist yet (their part's migration not applied) are
// skipped. Register it with reg.MustRegister / Register. Queries are bounded
// by cfg.Timeout; on error the affected metrics are left out of the scrape
// and the error is logged.
func NewDBCollector[TTx any](d store.Driver[TTx], cfg DBConfig) prometheus.Collector {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl := cfg.ConstLabels
	return &dbCollector{
		dialect: d.Dialect(), names: d.Names(), table: d.Table, pool: d.Pool(), cfg: cfg,
		parked:  prometheus.NewDesc("idem_dead_letters_parked", "Dead letters waiting for an operator.", []string{"consumer"}, cl),
		lag:     prometheus.NewDesc("idem_outbox_lag_seconds", "Age of the oldest unpublished outbox event.", nil, cl),
		pending: prometheus.NewDesc("idem_outbox_pending", "Unpublished outbox events.", nil, cl),
		rows:    prometheus.NewDesc("idem_table_rows", "Estimated rows per idem table.", []string{"table"}, cl),
		held:    prometheus.NewDesc("idem_effects_held", "Effects held for reconciliation, waiting for an operator.", []string{"kind"}, cl),
	}
}

// Describe implements prometheus.Collector.
func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.parked
	ch <- c.lag
	ch <- c.pending
	ch <- c.rows
	ch <- c.held
}

// Collect implements prometheus.Collector.
func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	for _, name := range Tables {
		ok, err := sqlmeta.Exists(ctx, c.pool, c.dialect, c.names, name)
		if err != nil {
			c.cfg.Logger.Warn("idem metrics: scrape", "error", err)
			return
		}
		if !ok {
			continue
		}
		if err := c.collectTable(ctx, ch, name); err != nil {
			c.cfg.Logger.Warn("idem metrics: scrape", "table", name, "error", err)
		}
	}
}

func (c *dbCollector) collectTable(ctx context.Context, ch chan<- prometheus.Metric, name string) error {
	t := c.table(name)
	n, err := sqlmeta.EstimateRows(ctx, c.pool, c.dialect, c.names, t, name)
	if err != nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(n), name)
	switch name {
	case "dead_letters":
		rows, err := c.pool.Query(ctx, `SELECT consumer, count(*) FROM `+t+` WHERE state = 'parked' GROUP BY consumer`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var consumer string
			var n int64
			if err := rows.Scan(&consumer, &n); err != nil {
				return err
			}
			ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(n), consumer)
		}
		return rows.Err()
	case "effects":
		ok, err := hasColumn(ctx, c.pool, c.dialect, c.names, name, "held_at")
		if err != nil || !ok {
			return err
		}
		rows, err := c.pool.Query(ctx, `SELECT kind, count(*) FROM `+t+` WHERE held_at > 0 AND state = 'in_progress' GROUP BY kind`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var kind string
			var n int64
			if err := rows.Scan(&kind, &n); err != nil {
				return err
			}
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(n), kind)
		}
		return rows.Err()
	case "outbox":
		lag, pending, err := outboxLag(ctx, c.pool, t, c.cfg.Now())
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag.Seconds())
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	}
	return nil
}

// outboxLag returns the age of the oldest pending outbox event (0 when
// none) and the number of pending events.
func outboxLag(ctx context.Context, q store.Querier, t string, now time.Time) (time.Duration, int64, error) {
	var pending int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE state = 'pending'`).Scan(&pending); err != nil {
		return 0, 0, fmt.Errorf("outbox pending: %w", err)
	}
	var oldest int64
	err := q.QueryRow(ctx, `SELECT created_at FROM `+t+` WHERE state = 'pending' ORDER BY seq LIMIT 1`).Scan(&oldest)
	if errors.Is(err, store.ErrNoRows) {
		return 0, pending, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("outbox lag: %w", err)
	}
	return max(now.Sub(store.FromMicros(oldest)), 0), pending, nil
}
