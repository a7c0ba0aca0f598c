package idemmetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/store"
)

// DBConfig tunes NewDBCollector.
type DBConfig struct {
	// Timeout bounds the queries of one scrape. Defaults to 5s.
	Timeout time.Duration
	// Now returns the current time (outbox lag). Defaults to time.Now.
	Now func() time.Time
	// Logger receives scrape errors. Defaults to slog.Default().
	Logger *slog.Logger
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
}

// dbCollector computes gauges from the database at scrape time, through
// the tables' owners.
type dbCollector[TTx any] struct {
	d   store.Driver[TTx]
	cfg DBConfig

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
		cfg.Logger = slog.Default()
	}
	cl := cfg.ConstLabels
	return &dbCollector[TTx]{
		d: d, cfg: cfg,
		parked:  prometheus.NewDesc("idem_dead_letters_parked", "Dead letters waiting for an operator.", []string{"consumer"}, cl),
		lag:     prometheus.NewDesc("idem_outbox_lag_seconds", "Age of the oldest unpublished outbox event.", nil, cl),
		pending: prometheus.NewDesc("idem_outbox_pending", "Unpublished outbox events.", nil, cl),
		rows:    prometheus.NewDesc("idem_table_rows", "Estimated rows per idem table.", []string{"table"}, cl),
		held:    prometheus.NewDesc("idem_effects_held", "Effects held for reconciliation, waiting for an operator.", []string{"kind"}, cl),
	}
}

// Describe implements prometheus.Collector.
func (c *dbCollector[TTx]) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.parked
	ch <- c.lag
	ch <- c.pending
	ch <- c.rows
	ch <- c.held
}

// Collect implements prometheus.Collector.
func (c *dbCollector[TTx]) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	for _, name := range Tables {
		ok, err := sqlmeta.TableExists(ctx, c.d, name)
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

func (c *dbCollector[TTx]) collectTable(ctx context.Context, ch chan<- prometheus.Metric, name string) error {
	n, ok, err := sqlmeta.EstimateRows(ctx, c.d, name)
	if err != nil {
		return err
	}
	if !ok { // no estimate (SQLite, or never analysed): count exactly
		by, err := counts(ctx, c.d, name)
		if err != nil {
			return err
		}
		n = total(by)
	}
	ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(n), name)
	switch name {
	case "dead_letters":
		parked, err := operator.DLQCountParked(ctx, c.d)
		if err != nil {
			return err
		}
		for consumer, n := range parked {
			ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(n), consumer)
		}
	case "effects":
		held, err := operator.EffectCountHeld(ctx, c.d)
		if err != nil {
			return err
		}
		for kind, n := range held {
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(n), kind)
		}
	case "outbox":
		b, err := operator.OutboxBacklog(ctx, c.d, c.cfg.Now())
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, b.Oldest.Seconds())
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.Pending))
	}
	return nil
}
