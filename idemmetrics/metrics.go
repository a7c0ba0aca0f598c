// Package idemmetrics is idem's observability: Prometheus collectors with
// idem_ names, registered on a caller-supplied prometheus.Registerer (never
// the global registry), log/slog attribute helpers and the log handler
// that joins records to traces ([TraceLogHandler]). *[Metrics] implements
// idem.Observer: pass it as the Observer of every component's Config. The duplicate and dead-letter counters carry the
// current trace id as exemplar ([Metrics.DuplicateContext],
// [Metrics.DeadLetteredContext]). Like the rest of idem it depends on the
// OpenTelemetry API only, never on its SDK.
//
// Two kinds of collectors:
//   - [Metrics]: counters, gauges and histograms updated by the runtime
//     (consumer workers, outbox relay, HTTP middleware, webhook receiver,
//     effect worker, version guard, GC) as things
//     happen in this process;
//   - [NewDBCollector]: gauges computed from the database at scrape time
//     (parked dead letters, outbox lag, table row estimates), so they are
//     right whichever process did the work.
//
// Every method of *Metrics is safe on a nil receiver (it does nothing), so
// components take an optional *Metrics.
package idemmetrics

import (
	"context"
	"time"

	"github.com/idemkit/idem"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

// Metrics holds idem's runtime metrics. It is safe for concurrent use.
type Metrics struct {
	duplicates   *prometheus.CounterVec
	conflicts    *prometheus.CounterVec
	processed    *prometheus.CounterVec
	failed       *prometheus.CounterVec
	retries      *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	unidentified *prometheus.CounterVec
	inFlight     *prometheus.GaugeVec
	duration     *prometheus.HistogramVec
	guard        *prometheus.CounterVec
	gcDeleted    *prometheus.CounterVec
	effectsHeld  *prometheus.CounterVec
	httpRequests *prometheus.CounterVec
	published    prometheus.Counter
	outboxDups   prometheus.Counter
	parked       *prometheus.CounterVec
	publishTime  prometheus.Histogram
}

var _ idem.Observer = (*Metrics)(nil)

// Options tunes New.
type Options struct {
	// Buckets of the handler and outbox publish duration histograms, in
	// seconds. Defaults to prometheus.DefBuckets.
	Buckets []float64
	// ConstLabels are added to every metric (e.g. {"service": "billing"}).
	ConstLabels prometheus.Labels
}

// New creates idem's runtime metrics and registers them on reg. It fails if
// reg already holds metrics with the same names (register once per
// registry and share the *Metrics).
//
// Metric names (labels):
//
//	idem_duplicates_suppressed_total      (component, consumer)  duplicates acked without running the handler
//	idem_fingerprint_conflicts_total      (component, consumer)  same id/key, different payload
//	idem_messages_processed_total         (consumer)             handler ran and the transaction committed
//	idem_messages_failed_total            (consumer, class)      handler or processing failures, by idem.ErrorClass
//	idem_retries_total                    (consumer)             deliveries sent back for redelivery (Nak)
//	idem_dead_letters_total               (consumer, class)      messages parked in the dead-letter store
//	idem_messages_unidentified_total      (consumer)             messages without a usable id, dead-lettered under a synthesized one
//	idem_in_flight                        (consumer)             messages being processed now
//	idem_handler_duration_seconds         (consumer)             processing time of one message / batch item
//	idem_version_guard_total              (table, result)        version-guarded writes, result applied|stale|missing
//	idem_gc_deleted_rows_total            (table)                rows deleted by the retention GC
//	idem_effects_held_total               (kind)                 effects held for reconciliation: provider key lifetime exceeded
//	idem_http_requests_total              (decision)             keyed requests by the middleware's decision: executed|replayed|in_flight|mismatch|rejected
//	idem_outbox_published_total           ()                     events acknowledged by the broker and marked published by the relay
//	idem_outbox_duplicates_total          ()                     events the broker reported as already stored (a republish inside its dedup window)
//	idem_outbox_parked_total              (class)                events parked by the relay after their last attempt, by idem.ErrorClass
//	idem_outbox_publish_duration_seconds  ()                     time of one broker publish of a batch of events
func New(reg prometheus.Registerer, opt Options) (*Metrics, error) {
	if opt.Buckets == nil {
		opt.Buckets = prometheus.DefBuckets
	}
	cl := opt.ConstLabels
	m := &Metrics{
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_duplicates_suppressed_total",
			Help: "Duplicate deliveries or requests suppressed without running the handler.", ConstLabels: cl},
			[]string{"component", "consumer"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_fingerprint_conflicts_total",
			Help: "Keys or message ids reused with a different payload.", ConstLabels: cl},
			[]string{"component", "consumer"}),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_messages_processed_total",
			Help: "Messages whose handler ran and whose transaction committed.", ConstLabels: cl}, []string{"consumer"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_messages_failed_total",
			Help: "Failed processing attempts by error class.", ConstLabels: cl}, []string{"consumer", "class"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_retries_total",
			Help: "Deliveries negatively acknowledged for a later retry.", ConstLabels: cl}, []string{"consumer"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_dead_letters_total",
			Help: "Messages parked in the dead-letter store by this process.", ConstLabels: cl}, []string{"consumer", "class"}),
		unidentified: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_messages_unidentified_total",
			Help: "Messages delivered without a usable message id, dead-lettered under a synthesized id by this process.", ConstLabels: cl},
			[]string{"consumer"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idem_in_flight",
			Help: "Messages being processed right now.", ConstLabels: cl}, []string{"consumer"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "idem_handler_duration_seconds",
			Help: "Time to process one message (transaction included).", Buckets: opt.Buckets, ConstLabels: cl},
			[]string{"consumer"}),
		guard: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_version_guard_total",
			Help: "Version-guarded writes by result (applied, stale, missing).", ConstLabels: cl}, []string{"table", "result"}),
		gcDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_gc_deleted_rows_total",
			Help: "Rows deleted by the retention GC.", ConstLabels: cl}, []string{"table"}),
		effectsHeld: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_effects_held_total",
			Help: "Effects held for reconciliation instead of calling the provider with a key older than its lifetime.", ConstLabels: cl},
			[]string{"kind"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_http_requests_total",
			Help: "Keyed requests by the idempotency middleware's decision (executed, replayed, in_flight, mismatch, rejected).", ConstLabels: cl},
			[]string{"decision"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_published_total",
			Help: "Outbox events acknowledged by the broker and marked published by this process's relay.", ConstLabels: cl}),
		outboxDups: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_duplicates_total",
			Help: "Outbox events the broker reported as already stored inside its dedup window (a republish).", ConstLabels: cl}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_outbox_parked_total",
			Help: "Outbox events parked by this process's relay after their last attempt, by error class.", ConstLabels: cl},
			[]string{"class"}),
		publishTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_outbox_publish_duration_seconds",
			Help: "Time of one broker publish of a batch of outbox events.", Buckets: opt.Buckets, ConstLabels: cl}),
	}
	for _, c := range []prometheus.Collector{m.duplicates, m.conflicts, m.processed, m.failed, m.retries,
		m.deadLettered, m.unidentified, m.inFlight, m.duration, m.guard, m.gcDeleted, m.effectsHeld,
		m.httpRequests, m.published, m.outboxDups, m.parked, m.publishTime} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Duplicate counts a suppressed duplicate of component ("consumer", "http",
// "webhook", …) for consumer (or operation).
func (m *Metrics) Duplicate(component, consumer string) {
	m.DuplicateContext(context.Background(), component, consumer)
}

// DuplicateContext is [Metrics.Duplicate] with the exemplar of the span in
// ctx: when ctx holds a sampled span context, the increment carries the
// exemplar {trace_id="…"} (exposed by the OpenMetrics format, promhttp's
// HandlerOpts.EnableOpenMetrics).
func (m *Metrics) DuplicateContext(ctx context.Context, component, consumer string) {
	if m != nil {
		inc(ctx, m.duplicates.WithLabelValues(component, consumer))
	}
}

// ExemplarTraceID is the exemplar label holding the trace id.
const ExemplarTraceID = "trace_id"

// inc adds one to c, with the trace id of ctx's sampled span as exemplar.
func inc(ctx context.Context, c prometheus.Counter) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if ea, ok := c.(prometheus.ExemplarAdder); ok {
			ea.AddWithExemplar(1, prometheus.Labels{ExemplarTraceID: sc.TraceID().String()})
			return
		}
	}
	c.Inc()
}

// DuplicateCount returns the duplicates counted so far for component and
// consumer in this process (0 on a nil Metrics).
func (m *Metrics) DuplicateCount(component, consumer string) int64 {
	if m == nil {
		return 0
	}
	var out dto.Metric
	if err := m.duplicates.WithLabelValues(component, consumer).Write(&out); err != nil {
		return 0
	}
	return int64(out.GetCounter().GetValue())
}

// FingerprintConflict counts a key reused with a different payload.
func (m *Metrics) FingerprintConflict(component, consumer string) {
	if m != nil {
		m.conflicts.WithLabelValues(component, consumer).Inc()
	}
}

// Processed counts a message processed and committed.
func (m *Metrics) Processed(consumer string) {
	if m != nil {
		m.processed.WithLabelValues(consumer).Inc()
	}
}

// Failed counts a failed attempt of class (idem.ErrorClass).
func (m *Metrics) Failed(consumer, class string) {
	if m != nil {
		m.failed.WithLabelValues(consumer, class).Inc()
	}
}

// Retry counts a delivery sent back for redelivery.
func (m *Metrics) Retry(consumer string) {
	if m != nil {
		m.retries.WithLabelValues(consumer).Inc()
	}
}

// DeadLettered counts a message parked in the dead-letter store.
func (m *Metrics) DeadLettered(consumer, class string) {
	m.DeadLetteredContext(context.Background(), consumer, class)
}

// DeadLetteredContext is [Metrics.DeadLettered] with the exemplar of the
// span in ctx (see [Metrics.DuplicateContext]).
func (m *Metrics) DeadLetteredContext(ctx context.Context, consumer, class string) {
	if m != nil {
		inc(ctx, m.deadLettered.WithLabelValues(consumer, class))
	}
}

// Unidentified counts a message that came without a usable message id
// (none set by its producer and none derived) and was dead-lettered under a
// synthesized id. It is counted in addition to [Metrics.DeadLettered].
func (m *Metrics) Unidentified(consumer string) {
	if m != nil {
		m.unidentified.WithLabelValues(consumer).Inc()
	}
}

// Start marks one message of consumer in flight and returns the function
// that ends it, observing its duration.
func (m *Metrics) Start(consumer string) (done func()) {
	if m == nil {
		return func() {}
	}
	g := m.inFlight.WithLabelValues(consumer)
	g.Inc()
	t0 := time.Now()
	return func() {
		g.Dec()
		m.duration.WithLabelValues(consumer).Observe(time.Since(t0).Seconds())
	}
}

// ObserveVersionGuard counts a version-guarded write on table; result is
// "applied", "stale" or "missing". Wire it to versionguard.Guard.Observe.
func (m *Metrics) ObserveVersionGuard(table, result string) {
	if m != nil {
		m.guard.WithLabelValues(table, result).Inc()
	}
}

// GCDeleted counts n rows of table deleted by the retention GC.
func (m *Metrics) GCDeleted(table string, n int64) {
	if m != nil && n > 0 {
		m.gcDeleted.WithLabelValues(table).Add(float64(n))
	}
}

// EffectHeld counts an effect of kind held for reconciliation because its
// provider key is older than the kind's key lifetime.
func (m *Metrics) EffectHeld(kind string) {
	if m != nil {
		m.effectsHeld.WithLabelValues(kind).Inc()
	}
}

// HTTPRequest counts a keyed request of the idempotency middleware by its
// decision (executed, replayed, in_flight, mismatch, rejected), with the
// exemplar of the span in ctx.
func (m *Metrics) HTTPRequest(ctx context.Context, decision string) {
	if m != nil {
		inc(ctx, m.httpRequests.WithLabelValues(decision))
	}
}

// OutboxPublished counts n events the relay published and marked.
func (m *Metrics) OutboxPublished(n int) {
	if m != nil && n > 0 {
		m.published.Add(float64(n))
	}
}

// OutboxDuplicate counts an event the broker reported as already stored
// inside its dedup window, with the exemplar of the span in ctx.
func (m *Metrics) OutboxDuplicate(ctx context.Context) {
	if m != nil {
		inc(ctx, m.outboxDups)
	}
}

// OutboxParked counts an event the relay parked, by error class
// (idem.ErrorClass), with the exemplar of the span in ctx.
func (m *Metrics) OutboxParked(ctx context.Context, class string) {
	if m != nil {
		inc(ctx, m.parked.WithLabelValues(class))
	}
}

// OutboxPublishDuration observes the time of one broker publish of a batch.
func (m *Metrics) OutboxPublishDuration(d time.Duration) {
	if m != nil {
		m.publishTime.Observe(d.Seconds())
	}
}
