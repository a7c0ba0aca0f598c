// Package effect is idem's ledger for external side effects: a charge, an
// e-mail, a third-party call made once in effect even when the worker that
// makes it crashes at the worst moment.
//
// Schedule the effect in the transaction that decides it, and let a worker
// perform it under its key:
//
//	ledger, err := effect.New(d, effect.Config{})
//	_, _, err = ledger.ScheduleTx(ctx, tx, effect.Effect{Key: "charge:" + orderID, Kind: "charge", Payload: req})
//	w, err := effect.NewWorker(ledger, effect.WorkerConfig[pgx.Tx]{})
//	err = w.Register("charge", func(ctx context.Context, key string, payload []byte) ([]byte, error) {
//		return provider.Charge(ctx, key, payload) // key is the provider's Idempotency-Key
//	})
//	err = idem.Run(ctx, w)
//
// For a call made inline, [Ledger.Do] runs it once under its key.
//
// The ledger never pretends to make an external call atomic with the
// database; nothing can. Instead every effect has a stable key that is
// recorded in the database and handed to the provider as its idempotency
// key, so a call repeated after a crash is deduplicated by the provider:
//
//   - Scheduled effects (the usual path): [Ledger.ScheduleTx] records the intent
//     inside the business transaction: an external effect is scheduled, not
//     performed, inside the transaction, so a rollback leaves no call behind. A [Worker] claims due effects with a lease,
//     calls the [Performer] registered for the kind with the effect key,
//     and records completed + result under a fencing token.
//   - Guarded inline calls: [Ledger.Do] runs a call now, two-phase: an
//     in_progress record with a lease is committed first, the call runs, and
//     the result is recorded under the fencing token.
//
// States: pending → in_progress → completed, or failed (permanent error or
// exhausted attempts; [Ledger.Retry] redrives it). A crash between the
// provider call and the completion record leaves the row in_progress; once
// its lease runs out it is claimed again and the provider sees the same key a
// second time (the drill's "worker dies after the provider call"
// scenario proves the provider still performs it once). The number of raw calls can therefore exceed the
// number of effects; the provider's unique effects cannot.
//
// The table is {{t}}effects (migration 0004_effects; 0007_trace_context
// adds the trace context columns, 0009 the key-lifetime columns). This
// package owns it: its states, its statements (internal/sqlset.Effects,
// written once per dialect in internal/dialect/postgres and internal/dialect/sqlite), its
// counts ([Ledger.Counts]; the operator tools read it through
// internal/operator, as they expire it). Claims, take-overs and
// fenced writes run on idem's one lease machine (internal/lease).
package effect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/errtext"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/panics"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// State is the lifecycle state of an effect.
type State string

// The states of an effect: the lease machine's one vocabulary
// (internal/lease), stored as these strings.
const (
	Pending    State = lease.Pending    // scheduled, waiting to be claimed (or released after a transient error)
	InProgress State = lease.InProgress // claimed under a lease; the call may or may not have reached the provider
	Completed  State = lease.Completed  // the provider answered; Result holds the answer
	Failed     State = lease.Failed     // permanent error or attempts exhausted; redrive with Retry
)

// Effect is one external side effect. Key, Kind, Payload and NotBefore are
// set by the caller of [Ledger.ScheduleTx]; the other fields are read back
// from the ledger.
type Effect struct {
	// Key names the intent ("order-confirmed-email:<orderId>") and is passed
	// to the provider as its idempotency key. Required, at most 255 bytes.
	Key string
	// Kind selects the [Performer] ("email.send"). Required for Schedule;
	// at most idem.MaxKeyLen bytes.
	Kind string
	// Payload is handed to the Performer unchanged.
	Payload []byte
	// NotBefore delays the first attempt. Zero means now.
	NotBefore time.Time

	State         State
	Attempts      int    // claims so far (attempts interrupted by a graceful stop are not counted)
	Token         int64  // fencing token: incremented on every claim
	Result        []byte // the provider's answer once completed
	LastError     string // the last error text, at most 4 KiB (cut on a rune), invalid UTF-8 as U+FFFD, NUL removed
	LeaseUntil    time.Time
	NextAttemptAt time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
	CompletedAt   time.Time
	ExpiresAt     time.Time // zero: kept until deleted
	// TraceParent and TraceState are the W3C trace context of the span
	// active when the effect was scheduled (set by Schedule from its
	// context, migration 0007; empty without a span). The worker calls the
	// provider in an idem.effect.call span that is a child of it.
	TraceParent, TraceState string
	// FirstAttemptAt is when a worker first claimed the effect: from then
	// on its key may have reached the provider (migration 0009; zero while
	// never claimed). The key's age for [WithKeyLifetime] counts from it.
	FirstAttemptAt time.Time
	// HeldAt is when the worker held the effect for reconciliation instead
	// of calling the provider again with a key older than the kind's key
	// lifetime (zero when not held). A held effect stays in_progress with
	// no lease and is never claimed; an operator checks the provider and
	// calls [Ledger.Resolve] (it happened) or [Ledger.Retry] (call again:
	// the key's lifetime starts over).
	HeldAt time.Time

	fingerprint []byte
}

// Config configures a Ledger.
type Config struct {
	// Lease is how long a claim (worker or Do) owns an effect before another
	// owner may take it over. It must exceed the longest call plus the
	// time to record its result. Defaults to 1 minute.
	Lease time.Duration
	// CallTimeout bounds one call to fn or a Performer. Defaults to half the
	// Lease; must not exceed the Lease.
	CallTimeout time.Duration
	// Retention is how long a completed effect is kept (its expires_at),
	// after which the retention GC may delete it; a later Schedule of the
	// same key would then run again. Defaults to 30 days; negative keeps
	// completed effects forever. Failed effects are always kept.
	Retention time.Duration
	// ExpiredLease is Do's policy for an abandoned in_progress key (the
	// earlier caller crashed or hung, and nobody knows whether its call
	// reached the provider). idem.Retake (the default) takes the key over
	// (new fencing token) and calls fn again with the same key; safe when
	// the provider honours idempotency keys. idem.Hold leaves the record
	// untouched and returns [idem.ErrNeedsReconciliation]: an operator
	// checks the provider and then calls [Ledger.Resolve] (it happened) or
	// [Ledger.Retry] (call again).
	ExpiredLease idem.ExpiredLease
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives warnings (lost leases, store errors). Defaults to
	// slog.Default(). Records logged while a span is active carry trace_id and
	// span_id.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.effect.call spans
	// (one per provider call, by Do and by a Worker on this Ledger), with
	// idem.effect.kind, idem.effect.key_hash, idem.attempt and idem.outcome.
	// Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// Ledger records and guards external side effects in one store. It is safe
// for concurrent use by many goroutines and processes.
type Ledger[TTx any] struct {
	d   store.Driver[TTx]
	cfg Config
	q   sqlset.Effects
	log *slog.Logger
	tr  trace.Tracer
}

// Errors of this package; the root sentinels (idem.ErrInProgress,
// idem.ErrLeaseLost, idem.ErrNeedsReconciliation, idem.ErrNotFound,
// idem.ErrFingerprintMismatch) are used where they fit.
var (
	// ErrFailed reports that the effect is in the failed state; see
	// [FailedError].
	ErrFailed = errors.New("effect: failed")
	// ErrNotRetryable reports a Retry or Resolve of an effect that is
	// neither failed nor abandoned (it is pending, completed or under a live
	// lease).
	ErrNotRetryable = errors.New("effect: not failed or abandoned")
)

// FailedError is returned by Do for a key whose effect failed permanently.
// It matches [ErrFailed] with errors.Is.
type FailedError struct {
	Key       string
	LastError string
}

// Error implements error.
func (e *FailedError) Error() string {
	return fmt.Sprintf("effect %q failed: %s", e.Key, e.LastError)
}

// Is reports whether target is ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// New returns a Ledger on d; the migrations 0004_effects and
// 0007_trace_context must be applied.
func New[TTx any](d store.Driver[TTx], cfg Config) (*Ledger[TTx], error) {
	if d == nil {
		return nil, checks.Optionf("effect: nil driver")
	}
	cfg.Lease = cmp.Or(cfg.Lease, time.Minute)
	if cfg.Lease < 0 {
		return nil, checks.Optionf("effect: negative Lease %v", cfg.Lease)
	}
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, cfg.Lease/2)
	if cfg.CallTimeout < 0 || cfg.CallTimeout > cfg.Lease {
		return nil, checks.Optionf("effect: CallTimeout %v must be positive and at most the Lease %v", cfg.CallTimeout, cfg.Lease)
	}
	cfg.Retention = cmp.Or(cfg.Retention, 30*24*time.Hour)
	if !cfg.ExpiredLease.Valid() {
		return nil, checks.Optionf("effect: unknown ExpiredLease policy %d", int(cfg.ExpiredLease))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Ledger[TTx]{
		d:   d,
		cfg: cfg,
		q:   d.Statements().Effects,
		log: obs.Logger(log).With("component", "effect"),
		tr:  obs.Tracer(cfg.TracerProvider),
	}, nil
}

func (l *Ledger[TTx]) now() time.Time { return l.cfg.Now() }

func (l *Ledger[TTx]) expiresAt(now time.Time) int64 {
	if l.cfg.Retention < 0 {
		return 0
	}
	return store.Micros(now.Add(l.cfg.Retention))
}

func scheduledFingerprint(kind string, payload []byte) idem.Fingerprint {
	return idem.FingerprintOf([]byte("scheduled"), []byte(kind), fpmatch.Payload(payload).Bytes())
}

// inlineFingerprint is the fingerprint of every Do key: a Do key and a
// scheduled key never match.
var inlineFingerprint = idem.FingerprintOf([]byte("inline"))

// checkFingerprint returns nil when the effect e was written with fp, and
// otherwise the mismatch error naming the key.
func checkFingerprint(e Effect, fp idem.Fingerprint) error {
	return fpmatch.Check("effect/"+e.Key, e.fingerprint, fp)
}

// Schedule records effect e in the caller's transaction tx; it is performed
// by a [Worker] after tx commits (and never if tx rolls back). It returns
// the stored effect and whether this call created it.
//
// Duplicate: scheduling a key that exists with the same kind and payload is
// a no-op returning the existing effect (created false), whatever its state,
// so a redelivered message or retried request schedules the intent once.
// The same key with another kind or payload fails with an error wrapping
// [idem.ErrFingerprintMismatch]; nothing is written. A key used by [Ledger.Do]
// cannot be scheduled (mismatch too).
//
// Trace context: the effect stores the span of ctx (the worker's
// idem.effect.call span is its child), unless e.TraceParent is set: then
// e.TraceParent and e.TraceState are stored (see [TraceContext]).
//
// Concurrency: two transactions scheduling one key serialise on the primary
// key; the second waits for the first to finish and then returns its row.
func (l *Ledger[TTx]) ScheduleTx(ctx context.Context, tx TTx, e Effect) (Effect, bool, error) {
	args, fp, err := l.scheduleArgs(ctx, e, l.now())
	if err != nil {
		return Effect{}, false, err
	}
	q := l.d.Tx(tx)
	for range 10 {
		got, err := scanEffect(q.QueryRow(ctx, l.q.Schedule, args...))
		if err == nil {
			return got, true, nil
		}
		if !errors.Is(err, store.ErrNoRows) {
			return Effect{}, false, fmt.Errorf("effect: schedule %q: %w", e.Key, err)
		}
		// A conflicting row exists and its transaction has finished; read it
		// in a new statement. It may have vanished (GC), then insert again.
		got, err = scanEffect(q.QueryRow(ctx, l.q.Get, e.Key))
		if errors.Is(err, store.ErrNoRows) {
			continue
		}
		if err != nil {
			return Effect{}, false, fmt.Errorf("effect: schedule %q: %w", e.Key, err)
		}
		if err := checkFingerprint(got, fp); err != nil {
			return Effect{}, false, err
		}
		return got, false, nil
	}
	return Effect{}, false, fmt.Errorf("effect: schedule %q: row keeps vanishing", e.Key)
}

// scheduleArgs validates e and returns the arguments of the Schedule
// statement for it at now, and its fingerprint.
func (l *Ledger[TTx]) scheduleArgs(ctx context.Context, e Effect, now time.Time) ([]any, idem.Fingerprint, error) {
	if err := checks.ID(e.Key); err != nil {
		return nil, idem.Fingerprint{}, fmt.Errorf("effect: key: %w", err)
	}
	if e.Kind == "" {
		return nil, idem.Fingerprint{}, fmt.Errorf("effect: %w: empty kind for %q", idem.ErrInvalidInput, e.Key)
	}
	if len(e.Kind) > idem.MaxKeyLen {
		return nil, idem.Fingerprint{}, fmt.Errorf("effect: %w: kind of %d bytes for %q exceeds %d", idem.ErrInvalidInput, len(e.Kind), e.Key, idem.MaxKeyLen)
	}
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	fp := scheduledFingerprint(e.Kind, payload)
	due := now
	if e.NotBefore.After(now) {
		due = e.NotBefore
	}
	tp, ts := e.TraceParent, e.TraceState
	if tp == "" {
		tp, ts = obs.Current(ctx)
	}
	return []any{e.Key, e.Kind, payload, fp.Bytes(), store.Micros(due), store.Micros(now), tp, ts}, fp, nil
}

// Scheduled is the outcome of one effect of [Ledger.ScheduleBatchTx]: the
// stored effect and whether the call created it.
type Scheduled struct {
	Effect  Effect
	Created bool
}

// ScheduleBatchTx is [Ledger.ScheduleTx] for many effects in the caller's
// transaction tx, with the same dedup and the same checks for each (the
// primary key decides; a key that exists with another kind or payload
// fails): with a driver that pipelines (pgx) the inserts travel in one
// round trip instead of one each, which is what a consumer's
// BatchHandler needs. It returns one outcome per effect, in order. Each
// effect's trace context is its TraceParent and TraceState when set
// (a batch handler sets them from each message's context with
// [TraceContext]), otherwise the span of ctx.
//
// The inserts run in key order, so two batches sharing keys lock them in
// the same order. An error (an invalid effect, a mismatch, a database
// error) names the key; effects of the batch may then have been written in
// tx, so roll tx (or its savepoint) back, as a failing BatchHandler's
// caller does.
func (l *Ledger[TTx]) ScheduleBatchTx(ctx context.Context, tx TTx, es []Effect) ([]Scheduled, error) {
	out := make([]Scheduled, len(es))
	order := make([]int, len(es))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(es[a].Key, es[b].Key) })
	if !l.d.SupportsPipeline() || len(es) < 2 {
		// Nothing to save: one statement at a time, in key order too.
		for _, i := range order {
			got, created, err := l.ScheduleTx(ctx, tx, es[i])
			if err != nil {
				return nil, err
			}
			out[i] = Scheduled{Effect: got, Created: created}
		}
		return out, nil
	}
	now := l.now()
	created := make([]bool, len(es))
	stmts := make([]store.Stmt, 0, len(es))
	for _, i := range order {
		args, _, err := l.scheduleArgs(ctx, es[i], now)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, store.Stmt{SQL: l.q.Schedule, Args: args, Rows: func(rows store.Rows) error {
			if !rows.Next() {
				return rows.Err() // the key exists: read below
			}
			got, err := scanEffect(rows)
			if err != nil {
				return err
			}
			out[i], created[i] = Scheduled{Effect: got, Created: true}, true
			return nil
		}})
	}
	if err := l.d.SendBatch(ctx, l.d.Tx(tx), stmts); err != nil {
		return nil, fmt.Errorf("effect: schedule a batch of %d: %w", len(es), err)
	}
	// The keys that existed (or repeat within the batch): ScheduleTx reads
	// each and checks its fingerprint.
	for _, i := range order {
		if created[i] {
			continue
		}
		got, c, err := l.ScheduleTx(ctx, tx, es[i])
		if err != nil {
			return nil, err
		}
		out[i] = Scheduled{Effect: got, Created: c}
	}
	return out, nil
}

// TraceContext returns the W3C trace context (traceparent, tracestate) of
// the span in ctx, empty without one: what [Ledger.ScheduleTx] stores for
// an effect scheduled under ctx, and what a caller of
// [Ledger.ScheduleBatchTx] sets as each effect's TraceParent and
// TraceState to trace it to its own message.
func TraceContext(ctx context.Context) (traceparent, tracestate string) { return obs.Current(ctx) }

// Get returns the effect stored under key, or an error wrapping
// [idem.ErrNotFound].
func (l *Ledger[TTx]) Get(ctx context.Context, key string) (Effect, error) {
	e, err := scanEffect(l.d.Pool().QueryRow(ctx, l.q.Get, key))
	if errors.Is(err, store.ErrNoRows) {
		return Effect{}, fmt.Errorf("effect %q: %w", key, idem.ErrNotFound)
	}
	return e, err
}

// List returns up to limit effects in state, oldest update first (e.g. the
// failed ones for an operator).
func (l *Ledger[TTx]) List(ctx context.Context, state State, limit int) ([]Effect, error) {
	if limit <= 0 {
		limit = 100
	}
	return l.list(ctx, l.q.ListState, string(state), limit)
}

// list runs a query returning effects.
func (l *Ledger[TTx]) list(ctx context.Context, sql string, args ...any) ([]Effect, error) {
	rows, err := l.d.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("effect: list: %w", err)
	}
	defer rows.Close()
	var out []Effect
	for rows.Next() {
		e, err := scanEffect(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ErrKeyExpired is the cause recorded with an effect held because its key
// is older than the provider's key lifetime (see [WithKeyLifetime]); it
// wraps [idem.ErrNeedsReconciliation].
var ErrKeyExpired = fmt.Errorf("effect: provider idempotency key older than its lifetime: %w", idem.ErrNeedsReconciliation)

// ListHeld returns up to limit effects held for reconciliation (see
// [Effect.HeldAt]), oldest hold first.
func (l *Ledger[TTx]) ListHeld(ctx context.Context, limit int) ([]Effect, error) {
	if limit <= 0 {
		limit = 100
	}
	return l.list(ctx, l.q.ListHeld, limit)
}

// hold marks the claimed effect held under the token: no lease, never
// claimed again until Resolve or Retry; the claim's attempt is not counted.
func (l *Ledger[TTx]) hold(ctx context.Context, key string, token int64, cause error) error {
	n, err := l.d.Pool().Exec(ctx, l.q.Hold, key, token, store.Micros(l.now()), errtext.Of(cause))
	return lease.Fence(n, err, fmt.Sprintf("effect: hold %q", key), token)
}

// Counts returns the number of effects per stored state; a state without
// effects is absent. Held effects ([Effect.HeldAt]) are stored in_progress
// and counted there.
func (l *Ledger[TTx]) Counts(ctx context.Context) (map[State]int64, error) {
	c, err := operator.EffectCounts(ctx, l.d)
	if err != nil {
		return nil, err
	}
	out := make(map[State]int64, len(c))
	for s, n := range c {
		out[State(s)] = n
	}
	return out, nil
}

// Retry redrives a failed effect, or one abandoned in_progress (lease run
// out, e.g. held by the Hold policy): it becomes pending, due now, with its
// attempt count reset, and the next worker claim (or Do call) performs it
// again with the same key. Redriving is safe because the provider
// deduplicates on the key. It fails with [ErrNotRetryable] for a pending,
// completed or live effect and [idem.ErrNotFound] for an unknown key.
func (l *Ledger[TTx]) Retry(ctx context.Context, key string) error {
	n, err := l.d.Pool().Exec(ctx, l.q.Redrive, key, store.Micros(l.now()))
	if err != nil {
		return fmt.Errorf("effect: retry %q: %w", key, err)
	}
	if n == 0 {
		return l.whyNot(ctx, key)
	}
	return nil
}

// Resolve marks an effect completed with result without calling the
// provider: for an operator who reconciled a failed or held effect and found
// that it did happen. Live or completed effects are not touched
// ([ErrNotRetryable]).
func (l *Ledger[TTx]) Resolve(ctx context.Context, key string, result []byte) error {
	now := l.now()
	if result == nil {
		result = []byte{}
	}
	n, err := l.d.Pool().Exec(ctx, l.q.Resolve, key, result, store.Micros(now), l.expiresAt(now))
	if err != nil {
		return fmt.Errorf("effect: resolve %q: %w", key, err)
	}
	if n == 0 {
		return l.whyNot(ctx, key)
	}
	return nil
}

func (l *Ledger[TTx]) whyNot(ctx context.Context, key string) error {
	e, err := l.Get(ctx, key)
	if err != nil {
		return err
	}
	return fmt.Errorf("effect %q is %s: %w", key, e.State, ErrNotRetryable)
}

// complete records the result under the fencing token.
func (l *Ledger[TTx]) complete(ctx context.Context, key string, token int64, result []byte) error {
	if result == nil {
		result = []byte{}
	}
	now := l.now()
	n, err := l.d.Pool().Exec(ctx, l.q.Complete, key, token, result, store.Micros(now), l.expiresAt(now))
	return lease.Fence(n, err, fmt.Sprintf("effect: complete %q", key), token)
}

// release puts the effect back to pending, due at next, under the token.
func (l *Ledger[TTx]) release(ctx context.Context, key string, token int64, next time.Time, cause error, uncount bool) error {
	delta := 0
	if uncount {
		delta = 1
	}
	n, err := l.d.Pool().Exec(ctx, l.q.Release, key, token, store.Micros(next), errtext.Of(cause), store.Micros(l.now()), delta)
	return lease.Fence(n, err, fmt.Sprintf("effect: release %q", key), token)
}

// fail marks the effect failed under the token and runs hook in the same
// transaction.
func (l *Ledger[TTx]) fail(ctx context.Context, key string, token int64, cause error, hook func(ctx context.Context, tx TTx, e Effect) error) (Effect, error) {
	var failed Effect
	err := store.InTx(ctx, l.d, func(tx TTx) error {
		e, err := scanEffect(l.d.Tx(tx).QueryRow(ctx, l.q.Fail, key, token, errtext.Of(cause), store.Micros(l.now())))
		n := int64(1)
		if errors.Is(err, store.ErrNoRows) {
			n, err = 0, nil // no row under the token: the lease was lost
		}
		if err := lease.Fence(n, err, fmt.Sprintf("effect: fail %q", key), token); err != nil {
			return err
		}
		failed = e
		if hook != nil {
			return hook(ctx, tx, e)
		}
		return nil
	})
	return failed, err
}

// callSafely runs f, the call of the effect key, turning a panic into an
// *idem.PanicError (class "panic", a transient failure) logged with its
// stack on log.
func callSafely(ctx context.Context, log *slog.Logger, key string, f func() ([]byte, error)) (res []byte, err error) {
	err = panics.Call(ctx, log, "effect call panicked; it is retried like a failed call", func() error {
		var ferr error
		res, ferr = f()
		return ferr
	}, "effect_key", key)
	return res, err
}
