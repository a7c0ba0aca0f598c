// Package retention keeps idem's tables bounded: a garbage collector that
// deletes, in bounded batches, the records whose replay horizon has passed:
//
//   - inbox rows past expires_at (the inbox sets it per consumer at insert
//     time), optionally kept longer per consumer with Config.InboxMinAge;
//   - HTTP idempotency key records past expires_at (per operation, set at
//     insert time);
//   - published outbox events older than Config.OutboxRetention;
//   - completed effects past their expires_at (0 keeps them);
//   - dead letters resolved (redriven or discarded) longer ago than
//     Config.DLQRetention;
//   - finished sagas (completed or compensated) that finished longer ago
//     than Config.SagaRetention, with their barrier rows (saga_steps):
//     the steps first, then the sagas.
//
// In a service, beside its other runners:
//
//	gc, err := retention.New(d, retention.Config{
//		OutboxRetention: 7 * 24 * time.Hour,  // published events
//		DLQRetention:    30 * 24 * time.Hour, // resolved dead letters
//	})
//	report, err := gc.RunOnce(ctx) // one pass: report.Deleted per table
//	err = idem.Run(ctx, gc, relay, orders) // or a pass every Config.Interval with the service
//	// the inbox must remember a message as long as the stream can redeliver it:
//	err = retention.CheckRetention("billing", 7*24*time.Hour, streamMaxAge)
//
// Pending work is never deleted: pending or parked outbox events, parked
// dead letters, effects not completed, sagas running, compensating or held
// (and their steps). Each batch is its own short
// statement (at most Config.BatchSize rows), so consumers, relays and HTTP
// handlers keep running while the GC works. Running several GCs at once is
// safe (each row is deleted once; the others find fewer rows). A crash
// between batches loses nothing: the next run continues.
//
// Deleting a record ends its dedup protection: a duplicate arriving after
// that is processed again. Retentions must therefore cover the longest
// replay horizon (client retry, broker redelivery / stream max age, webhook
// replay, operator redrive); [CheckRetention] warns at start-up when they
// do not.
//
// Sagas: the barrier rows (saga_steps) are what refuse a late action (one
// redriven, or a zombie's, arriving after its compensation). They are
// deleted only for sagas that finished longer ago than SagaRetention, far
// longer than any in-flight action can live: by then the saga's effects
// are all settled, their leases and retries long over, and the effects
// themselves expire through the ledger's retention. An effect an operator
// redrives (effect.Ledger.Retry) after that finds its saga finished or
// gone and is refused without a call: the saga worker checks, in the
// fenced transaction that would insert the barrier row, that the saga
// still exists and is not finished (saga.Completed and saga.Compensated
// are final: nothing changes a finished saga again), so deleting the steps
// before the saga, concurrently with the worker, never lets an action run.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/store"
)

// Config configures a GC.
type Config struct {
	// BatchSize is the most rows one DELETE removes. Defaults to 1000.
	BatchSize int
	// Interval is the pause between passes of Run. Defaults to 1 minute.
	Interval time.Duration
	// OutboxRetention is how long published outbox events are kept.
	// Defaults to 7 days.
	OutboxRetention time.Duration
	// DLQRetention is how long resolved dead letters are kept. Defaults to
	// 30 days.
	DLQRetention time.Duration
	// SagaRetention is how long finished (completed or compensated) sagas
	// and their steps are kept after they finished. Defaults to 30 days,
	// like DLQRetention: a saga's record is an operator's view of what
	// happened (idem sagas, the console) and its barrier rows refuse late
	// actions, so it is kept as long as a resolved dead letter, well past
	// any lease, retry or redrive of its effects.
	SagaRetention time.Duration
	// InboxMinAge keeps the inbox rows of the named consumers at least this
	// long after they were received, even past their expires_at: use it to
	// lengthen a consumer's retention after the fact (e.g. after a
	// CheckRetention warning) without rewriting rows.
	InboxMinAge map[string]time.Duration
	// Partitions configures the partitioned layout's maintenance, used
	// when the store is opened with store.LayoutPartitioned (see
	// [Partition]): each pass then creates the inbox partitions ahead and
	// drops the expired ones instead of deleting their rows.
	Partitions PartitionConfig
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives a summary of every pass that deleted rows and errors.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Observer, if set, counts deleted rows (idem_gc_deleted_rows_total);
	// pass an *idemmetrics.Metrics.
	Observer idem.Observer
}

// Report summarises one pass.
type Report struct {
	// Deleted counts rows deleted per table (inbox, idempotency_keys,
	// outbox, effects, dead_letters, saga_steps, sagas).
	Deleted map[string]int64 `json:"deleted"`
	// Batches is the number of DELETE statements run.
	Batches int `json:"batches"`
	// Skipped lists tables that do not exist (yet) in the database.
	Skipped []string `json:"skipped,omitempty"`
	// Took is the duration of the pass.
	Took time.Duration `json:"took_ns"`
	// Partitions is what the pass did to the inbox's partitions (nil
	// unless the store has the partitioned layout).
	Partitions *PartitionReport `json:"partitions,omitempty"`
}

// Total is the number of rows deleted from every table.
func (r Report) Total() int64 {
	var n int64
	for _, v := range r.Deleted {
		n += v
	}
	return n
}

// GC deletes expired records. It is safe for concurrent use.
type GC[TTx any] struct {
	d   store.Driver[TTx]
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	exists map[string]bool // protected by mu; only positive answers are cached
}

// New returns a GC over d.
func New[TTx any](d store.Driver[TTx], cfg Config) (*GC[TTx], error) {
	if d == nil {
		return nil, checks.Optionf("retention: nil driver")
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Minute
	}
	if cfg.OutboxRetention == 0 {
		cfg.OutboxRetention = 7 * 24 * time.Hour
	}
	if cfg.DLQRetention == 0 {
		cfg.DLQRetention = 30 * 24 * time.Hour
	}
	if cfg.SagaRetention == 0 {
		cfg.SagaRetention = 30 * 24 * time.Hour
	}
	if cfg.BatchSize < 0 || cfg.Interval < 0 || cfg.OutboxRetention < 0 || cfg.DLQRetention < 0 || cfg.SagaRetention < 0 {
		return nil, checks.Optionf("retention: negative BatchSize, Interval or retention")
	}
	for c, a := range cfg.InboxMinAge {
		if a <= 0 || c == "" {
			return nil, checks.Optionf("retention: InboxMinAge[%q] must be positive", c)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if d.Names().Layout == store.LayoutPartitioned {
		var err error
		if cfg.Partitions.OutboxRetention == 0 {
			cfg.Partitions.OutboxRetention = cfg.OutboxRetention
		}
		if cfg.Partitions, err = cfg.Partitions.withDefaults(); err != nil {
			return nil, err
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &GC[TTx]{d: d, cfg: cfg, log: obs.Component(cfg.Logger, "retention"), exists: map[string]bool{}}, nil
}

// rule is one table's expiry (an internal/operator Expire), with the horizon the
// GC's configuration gives it.
type rule struct {
	table   string
	horizon time.Time
	expire  func(ctx context.Context, d operator.DB, horizon time.Time, limit int) (int64, error)
}

// rules are the tables' expiries, in the order they run: the owners decide
// which rows have passed their horizon (pending work never has).
func (g *GC[TTx]) rules(now time.Time) []rule {
	sagas := now.Add(-g.cfg.SagaRetention)
	inboxHorizon, outboxHorizon := now, now.Add(-g.cfg.OutboxRetention)
	if g.partitioned() {
		// Expired rows of the partition holding now leave with it; rows
		// before it are in inbox partitions kept for InboxMinAge, or in a
		// default partition: those are deleted in batches (the inbox, the
		// idempotency keys and the effect ledger alike). The outbox's
		// partitions are by created_at: published events of the partition
		// holding the retention's horizon leave with it, those before it
		// (in a partition kept for an event still to publish, or in the
		// default one) are deleted in batches.
		inboxHorizon, _ = bounds(now, g.cfg.Partitions.Span)
		outboxHorizon, _ = bounds(outboxHorizon, g.cfg.Partitions.Span)
	}
	return []rule{
		{"inbox", inboxHorizon, g.expireInbox},
		{"idempotency_keys", inboxHorizon, operator.HTTPKeyExpire},
		{"outbox", outboxHorizon, operator.OutboxExpire},
		{"effects", inboxHorizon, operator.EffectExpire},
		{"dead_letters", now.Add(-g.cfg.DLQRetention), operator.DLQExpire},
		// Steps before their sagas: a saga whose steps remain waits.
		{"saga_steps", sagas, operator.SagaExpireSteps},
		{"sagas", sagas, operator.SagaExpireSagas},
	}
}

// expireInbox is operator.InboxExpire, keeping the rows of the consumers of
// Config.InboxMinAge received within their minimum age.
func (g *GC[TTx]) expireInbox(ctx context.Context, d operator.DB, horizon time.Time, limit int) (int64, error) {
	return operator.InboxExpire(ctx, d, horizon, limit, g.keep(horizon))
}

// keep maps each consumer of Config.InboxMinAge to the received_at from
// which its rows are kept at horizon.
func (g *GC[TTx]) keep(horizon time.Time) map[string]time.Time {
	keep := make(map[string]time.Time, len(g.cfg.InboxMinAge))
	for c, age := range g.cfg.InboxMinAge {
		keep[c] = horizon.Add(-age)
	}
	return keep
}

// partitioned reports whether the GC's store has the partitioned layout.
func (g *GC[TTx]) partitioned() bool {
	return g.d.Names().Layout == store.LayoutPartitioned && g.d.Dialect() == store.Postgres
}

// RunOnce deletes every expired record, batch by batch, until no table has
// any left, and reports what it deleted. On error (or ctx done) it stops
// and returns what it deleted so far with the error.
func (g *GC[TTx]) RunOnce(ctx context.Context) (Report, error) {
	t0 := time.Now()
	rep := Report{Deleted: map[string]int64{}}
	now := g.cfg.Now()
	if g.partitioned() {
		pr, err := MaintainPartitions(ctx, g.d, g.cfg.Partitions, now, g.keep(now))
		rep.Partitions = &pr
		if err != nil {
			rep.Took = time.Since(t0)
			return rep, err
		}
	}
	for _, j := range g.rules(now) {
		ok, err := g.tableExists(ctx, j.table)
		if err != nil {
			return rep, err
		}
		if !ok {
			rep.Skipped = append(rep.Skipped, j.table)
			continue
		}
		for {
			if err := ctx.Err(); err != nil {
				rep.Took = time.Since(t0)
				return rep, err
			}
			n, err := j.expire(ctx, g.d, j.horizon, g.cfg.BatchSize)
			if err != nil {
				rep.Took = time.Since(t0)
				return rep, fmt.Errorf("retention: %s: %w", j.table, err)
			}
			rep.Batches++
			rep.Deleted[j.table] += n
			if g.cfg.Observer != nil {
				g.cfg.Observer.GCDeleted(j.table, n)
			}
			if n < int64(g.cfg.BatchSize) {
				break
			}
		}
	}
	rep.Took = time.Since(t0)
	if rep.Total() > 0 {
		g.log.InfoContext(ctx, "expired records deleted", "deleted", rep.Deleted, "batches", rep.Batches, "took", rep.Took)
	}
	if pr := rep.Partitions; pr != nil && (len(pr.Dropped) > 0 || len(pr.Created) > 0 || len(pr.Busy) > 0) {
		g.log.InfoContext(ctx, "inbox partitions maintained", "created", pr.Created, "dropped", pr.Dropped,
			"dropped_rows_estimate", pr.DroppedRows, "kept", pr.Kept, "busy", pr.Busy)
	}
	return rep, nil
}

// tableExists checks a table once; missing tables are checked again on the
// next pass (their migration may be applied meanwhile).
func (g *GC[TTx]) tableExists(ctx context.Context, name string) (bool, error) {
	g.mu.Lock()
	ok := g.exists[name]
	g.mu.Unlock()
	if ok {
		return true, nil
	}
	ok, err := sqlmeta.TableExists(ctx, g.d, name)
	if err != nil {
		return false, fmt.Errorf("retention: %w", err)
	}
	if ok {
		g.mu.Lock()
		g.exists[name] = true
		g.mu.Unlock()
	}
	return ok, nil
}

// Run runs a pass every Config.Interval until ctx is done, then returns
// nil. A failing pass is logged and retried at the next interval.
func (g *GC[TTx]) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := g.RunOnce(ctx); err != nil && ctx.Err() == nil {
			g.log.ErrorContext(ctx, "retention pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ErrRetentionTooShort reports a consumer retention shorter than the time
// its broker may still redeliver a message: a redelivery after the inbox
// row is deleted would be processed twice.
var ErrRetentionTooShort = errors.New("retention: inbox retention shorter than the redelivery horizon")

// CheckRetention returns an error wrapping ErrRetentionTooShort when
// consumer's inbox retention is shorter than streamMaxAge (the stream's max
// age, or more generally the longest time after which the broker or an
// operator may still deliver the message). streamMaxAge <= 0 means unknown
// or unlimited and is not checked. Call it at start-up and log the error
// as a warning (the consumer runtime checks its own retention this way).
func CheckRetention(consumer string, retention, streamMaxAge time.Duration) error {
	if streamMaxAge > 0 && retention < streamMaxAge {
		return fmt.Errorf("%w: consumer %q keeps inbox records %s but its stream keeps messages %s; "+
			"raise the inbox retention (inbox.Config.RetentionFor) to at least %s",
			ErrRetentionTooShort, consumer, retention, streamMaxAge, streamMaxAge)
	}
	return nil
}
