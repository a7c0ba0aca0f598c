package effect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/panics"
	"github.com/idemkit/idem/store"
)

// Performer performs one effect of a kind: it calls the provider with key
// as the provider's idempotency key and returns the provider's answer, which
// is stored as the effect's result.
//
// A Performer may run more than once for one key (after a crash, a timeout
// or a lost lease), possibly concurrently with a zombie of itself, so the
// provider must deduplicate on key. Return an error wrapped with
// [idem.Permanent] when retrying can never succeed (a 4xx); any other error
// is retried with backoff. ctx ends at the call timeout or when the worker
// stops.
type Performer func(ctx context.Context, key string, payload []byte) ([]byte, error)

// Breaker is a circuit-breaker hook for one kind. The worker calls Allow
// before claiming effects of the kind: a non-nil error skips the kind until
// the next poll (the effects stay pending, nothing is claimed or counted as
// an attempt). It calls Record with the outcome of every call (nil on
// success). Implementations must be safe for concurrent use; when Allow
// returns nil the worker may start up to Concurrency calls.
type Breaker interface {
	Allow() error
	Record(err error)
}

// KindOption configures one kind at [Worker.Register].
type KindOption func(*kind)

// WithRateLimit caps calls of the kind to r per second with bursts of
// burst (at least 1): the worker only claims as many effects as it has
// tokens for, so a backlog drains at the provider's pace and leases do not
// run out while waiting. The limit is per Worker (per process).
func WithRateLimit(r rate.Limit, burst int) KindOption {
	return func(k *kind) { k.lim = rate.NewLimiter(r, max(burst, 1)) }
}

// WithBreaker installs a circuit-breaker hook for the kind.
func WithBreaker(b Breaker) KindOption { return func(k *kind) { k.breaker = b } }

// WithKeyLifetime declares how long the kind's provider honours an
// idempotency key (Stripe: 24 hours): the worker never calls the provider
// again with a key older than d, counted from the effect's first claim
// ([Effect.FirstAttemptAt]). Past it, the provider may have forgotten the
// key and would perform a repeated call again, so instead of calling, the
// worker holds the effect for reconciliation ([Effect.HeldAt], last error
// wrapping [ErrKeyExpired]): it shows in [Ledger.ListHeld], in `idem stats`
// (effects state "held"), in the console's held work and in the
// idem_effects_held gauge, and waits for an operator's [Ledger.Resolve] or
// [Ledger.Retry]. The first call of an effect is never held, however late.
// 0 (the default) declares no lifetime: the worker retries as configured.
func WithKeyLifetime(d time.Duration) KindOption { return func(k *kind) { k.keyLifetime = d } }

// WithMaxAttempts overrides [WorkerConfig.MaxAttempts] for the kind.
func WithMaxAttempts(n int) KindOption { return func(k *kind) { k.maxAttempts = n } }

type kind struct {
	name        string
	perform     Performer
	lim         *rate.Limiter // nil: unlimited
	breaker     Breaker       // nil: none
	maxAttempts int
	keyLifetime time.Duration // 0: not declared
	backlogged  atomic.Bool   // the last claim got all it asked for: due work may wait (Saturated)
}

// WorkerConfig configures a Worker.
type WorkerConfig[TTx any] struct {
	// Concurrency is the maximum number of calls in flight. Defaults to 10.
	// A call's slot frees once its completion is queued for the next batch
	// (see CompleteBatch): at most CompleteBatch completions wait in the
	// queue besides the batch being recorded, and a completion not yet
	// recorded keeps its lease like a call in flight.
	Concurrency int
	// PollInterval is how often the worker looks for due effects when it
	// found none. Defaults to 1 second.
	PollInterval time.Duration
	// CompleteBatch is the most completions recorded in one batch (on
	// PostgreSQL one set-based UPDATE, sqlset.Effects.CompleteBatch; one
	// transaction of fenced UPDATEs on SQLite and MySQL). Defaults to, and
	// is capped by, Concurrency; 1 records each completion on its own.
	CompleteBatch int
	// CompleteDelay is the longest a completion waits for others to join
	// its batch; a batch is recorded at once when it is full or when no
	// other call is still running. It is also the longest the worker waits,
	// while due work is left, for a quarter of its slots to be free before
	// it claims again (so a fast provider is fed by claims of many rows,
	// not a claim per finished call). Defaults to 2 milliseconds.
	CompleteDelay time.Duration
	// MaxAttempts is the number of claims after which a failing effect is
	// marked failed. Defaults to 10.
	MaxAttempts int
	// Backoff returns the delay before attempt+1 after a transient failure
	// of attempt (1-based). Defaults to FullJitter(time.Second, 5*time.Minute),
	// idem's one full-jitter backoff (idem.Backoff{Base: time.Second,
	// Max: 5*time.Minute}).
	Backoff func(attempt int) time.Duration
	// OnFailed runs in the transaction that marks an effect failed
	// (permanent error or attempts exhausted), with the error that failed
	// it: plug the dead-letter store here (e.g. park the effect with its
	// key, kind, payload and error) so the failure and its dead letter
	// commit together. If it returns an error (or panics: the panic is
	// recovered and logged with its stack) the transaction rolls back and
	// the effect is retried later as a transient failure. Defaults to none:
	// the failed state itself is the dead letter, listed with
	// [Ledger.List] and redriven with [Ledger.Retry]. With the dlq package:
	//
	//	OnFailed: func(ctx context.Context, tx pgx.Tx, e effect.Effect, cause error) error {
	//		_, err := dead.ParkTx(ctx, tx, dlq.Letter{Consumer: "effect:" + e.Kind,
	//			MessageID: e.Key, Payload: e.Payload, Error: cause.Error(),
	//			ErrorClass: idem.ErrorClass(cause), Attempts: e.Attempts})
	//		return err
	//	},
	//
	// The effect stays failed in the ledger; after fixing the cause, redrive
	// it with [Ledger.Retry] (the same key is sent again, so a provider that
	// did perform it answers its stored result) and discard the letter.
	OnFailed func(ctx context.Context, tx TTx, e Effect, cause error) error
	// Logger receives the worker's logs. Defaults to the Ledger's.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.effect.call span of
	// each call the worker makes. Defaults to the Ledger's
	// (Config.TracerProvider).
	TracerProvider trace.TracerProvider
	// Observer, if set, counts effects held for reconciliation
	// (idem_effects_held_total, see [WithKeyLifetime]); pass an
	// *idemmetrics.Metrics.
	Observer idem.Observer
}

// Worker claims due scheduled effects and performs them with the registered
// Performers. Several Workers (in one or many processes) may run on one
// ledger: each effect is claimed by one of them at a time (SKIP LOCKED on
// PostgreSQL, the single writer on SQLite), and a claim is fenced by a token
// so a worker that lost its lease cannot record anything.
type Worker[TTx any] struct {
	l   *Ledger[TTx]
	cfg WorkerConfig[TTx]
	log *slog.Logger
	tr  trace.Tracer

	mu      sync.Mutex // protects kinds and running
	kinds   map[string]*kind
	running bool

	finalise time.Duration // bounds recording an effect's outcome (finaliseTimeout)
}

// finaliseTimeout bounds the statements that record a call's outcome,
// counted from when the call returned.
const finaliseTimeout = 10 * time.Second

// NewWorker returns a Worker on the ledger; register Performers before Run.
func NewWorker[TTx any](l *Ledger[TTx], cfg WorkerConfig[TTx]) (*Worker[TTx], error) {
	if l == nil {
		return nil, checks.Optionf("effect: nil ledger")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 10)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 10)
	cfg.CompleteBatch = cmp.Or(cfg.CompleteBatch, cfg.Concurrency)
	cfg.CompleteDelay = cmp.Or(cfg.CompleteDelay, 2*time.Millisecond)
	if cfg.Concurrency < 0 || cfg.PollInterval < 0 || cfg.MaxAttempts < 0 || cfg.CompleteBatch < 0 || cfg.CompleteDelay < 0 {
		return nil, checks.Optionf("effect: negative Concurrency, PollInterval, MaxAttempts, CompleteBatch or CompleteDelay")
	}
	if cfg.Backoff == nil {
		cfg.Backoff = FullJitter(time.Second, 5*time.Minute)
	}
	log := l.log
	if cfg.Logger != nil {
		log = obs.Logger(cfg.Logger)
	}
	cfg.Observer = obs.Observer(cfg.Observer)
	tr := l.tr
	if cfg.TracerProvider != nil {
		tr = obs.Tracer(cfg.TracerProvider)
	}
	return &Worker[TTx]{l: l, cfg: cfg, log: log, tr: tr, kinds: map[string]*kind{}, finalise: finaliseTimeout}, nil
}

// Register sets the Performer of kind. Registering a kind twice, or after
// Run started, is an error. Only registered kinds are claimed, so workers
// with different kinds can share one table.
func (w *Worker[TTx]) Register(kindName string, p Performer, opts ...KindOption) error {
	if kindName == "" || p == nil {
		return checks.Optionf("effect: Register needs a kind and a Performer")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return checks.Optionf("effect: Register(%q) after Run", kindName)
	}
	if _, dup := w.kinds[kindName]; dup {
		return checks.Optionf("effect: kind %q registered twice", kindName)
	}
	k := &kind{name: kindName, perform: p, maxAttempts: w.cfg.MaxAttempts}
	for _, o := range opts {
		o(k)
	}
	if k.maxAttempts <= 0 {
		return checks.Optionf("effect: kind %q: MaxAttempts must be positive", kindName)
	}
	if k.keyLifetime < 0 {
		return checks.Optionf("effect: kind %q: negative key lifetime", kindName)
	}
	if k.breaker != nil {
		k.breaker = safeBreaker{b: k.breaker, log: w.log, kind: kindName}
	}
	w.kinds[kindName] = k
	return nil
}

// safeBreaker runs a kind's Breaker (user code) so that its panic cannot
// stop the worker: a panicking Allow counts as an open breaker (no call),
// a panicking Record is logged.
type safeBreaker struct {
	b    Breaker
	log  *slog.Logger
	kind string
}

func (s safeBreaker) Allow() error {
	return panics.Call(context.Background(), s.log, "Breaker.Allow panicked; the kind is treated as open", s.b.Allow, "kind", s.kind)
}

func (s safeBreaker) Record(err error) {
	_ = panics.Call(context.Background(), s.log, "Breaker.Record panicked", func() error { s.b.Record(err); return nil }, "kind", s.kind)
}

// backoff is WorkerConfig.Backoff (user code) for attempt; if it panics,
// the default backoff's delay is used and the panic logged.
func (w *Worker[TTx]) backoff(attempt int) time.Duration {
	var d time.Duration
	if panics.Call(context.Background(), w.log, "WorkerConfig.Backoff panicked; using the default backoff",
		func() error { d = w.cfg.Backoff(attempt); return nil }, "attempt", attempt) != nil {
		d = FullJitter(time.Second, 5*time.Minute)(attempt)
	}
	return d
}

// Run claims and performs effects until ctx ends, then waits for the calls
// in flight and returns nil (or a configuration error at start). A Worker
// runs at most once at a time; it may be run again after Run returned.
//
// Stopping: the context of calls in flight is cancelled. A call that still
// returns a result is recorded; one that fails because of the stop is
// released to pending (due now, the attempt not counted) so another worker
// re-sends it with the same key. A crash instead leaves the effect
// in_progress until its lease runs out, then it is claimed again.
//
// Outcomes per call: success → completed + result; permanent error
// ([idem.IsPermanent]) or MaxAttempts reached → failed (+ OnFailed);
// other errors → pending again after Backoff(attempt). A worker whose lease
// was taken over writes nothing (logged as a lost lease).
func (w *Worker[TTx]) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return checks.Optionf("effect: Worker.Run called twice")
	}
	if len(w.kinds) == 0 {
		w.mu.Unlock()
		return checks.Optionf("effect: no kinds registered")
	}
	w.running = true
	kinds := make([]*kind, 0, len(w.kinds))
	for _, k := range w.kinds {
		kinds = append(kinds, k)
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
		for _, k := range kinds {
			k.backlogged.Store(false) // a stopped worker holds no gate closed
		}
	}()
	slices.SortFunc(kinds, func(a, b *kind) int {
		if a.name < b.name {
			return -1
		}
		return 1
	})

	var wg sync.WaitGroup
	c := newCompleter(w.l, min(w.cfg.CompleteBatch, w.cfg.Concurrency), w.cfg.CompleteDelay)
	fctx, fcancel := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() { defer close(flushed); c.run(fctx) }()
	defer func() {
		// Calls in flight finish (their completions recorded) before the
		// completer stops.
		wg.Wait()
		close(c.in)
		<-flushed
		fcancel()
	}()
	slots := make(chan struct{}, w.cfg.Concurrency)
	freed := make(chan struct{}, 1)
	start := 0
	// more: due work may be left. It stays true until a pass visited every
	// kind and none of them returned a full batch, so a wake-up that finds
	// every slot busy (a stale one in freed) keeps it: the next freed slot
	// is refilled at once, not a poll interval later.
	more := true
	// refill: while work is due, the worker claims once this many slots
	// are free (or CompleteDelay after the first one freed).
	refill := max(1, w.cfg.Concurrency/4)
	for ctx.Err() == nil {
		wait := w.cfg.PollInterval
		if cap(slots)-len(slots) == 0 {
			more = true // look once a slot frees
			markBacklogged(kinds)
		} else {
			more = false
			for i := range kinds {
				k := kinds[(start+i)%len(kinds)]
				free := cap(slots) - len(slots)
				if free == 0 {
					more = true // kinds left unvisited: they may have due work
					markBacklogged(kinds)
					break
				}
				if k.breaker != nil && k.breaker.Allow() != nil {
					continue
				}
				n := free
				if k.lim != nil {
					tok := int(math.Floor(k.lim.Tokens()))
					if tok < 1 {
						r := k.lim.Reserve()
						wait = min(wait, r.Delay())
						r.Cancel()
						continue
					}
					n = min(n, tok)
				}
				k.backlogged.Store(true) // until the claim tells
				claimed, err := w.claim(ctx, k, n)
				if err != nil {
					k.backlogged.Store(false)
					if ctx.Err() == nil {
						w.log.WarnContext(ctx, "claim failed", "kind", k.name, "error", err)
					}
					more = false // back off to the poll interval
					break
				}
				if k.lim != nil && len(claimed) > 0 {
					k.lim.AllowN(time.Now(), len(claimed))
				}
				k.backlogged.Store(len(claimed) == n)
				if len(claimed) == n {
					more = true
				}
				for _, e := range claimed {
					slots <- struct{}{}
					c.calling.Add(1)
					wg.Go(func() {
						// The slot frees when the call ended: once its
						// completion is queued for the next batch (so the
						// next claim overlaps the batch's round trip), or
						// when its other outcome is recorded.
						var once sync.Once
						free := func() {
							once.Do(func() {
								<-slots
								select {
								case freed <- struct{}{}:
								default:
								}
							})
						}
						defer free()
						w.perform(ctx, c, free, k, e)
					})
				}
			}
			start++
		}
		if more {
			if cap(slots)-len(slots) >= refill {
				continue
			}
			// Work is due but fewer than refill slots are free: wait for
			// one to free, then at most CompleteDelay for others to join,
			// so a fast provider is fed by claims of many rows rather than
			// a claim per finished call (each claim is a round trip and an
			// UPDATE of its rows).
			if cap(slots)-len(slots) == 0 {
				select {
				case <-ctx.Done():
				case <-freed:
				}
			}
			if cap(slots)-len(slots) < refill {
				cool := time.NewTimer(w.cfg.CompleteDelay)
			gather:
				for cap(slots)-len(slots) < refill {
					select {
					case <-ctx.Done():
						break gather
					case <-freed:
					case <-cool.C:
						break gather
					}
				}
				cool.Stop()
			}
			continue
		}
		// Nothing due (or the due work is paced by a rate limit or a
		// breaker): look again after the poll interval, or when the rate
		// limiter has a token.
		timer := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
	return nil
}

// claim leases up to n due effects of kind k in one statement: the lease
// machine's Acquire for many rows at once. Its condition is
// [lease.Decide]'s Acquire under idem.Retake, written in SQL so that the
// batch costs one round trip: pending effects that are due, and
// in_progress ones whose lease ended (an in_progress row's next_attempt_at
// is its lease_until); held effects are never claimed. Every claimed row
// gets a new token, so the worker whose lease ran out writes nothing more
// ([lease.Fence]).
//
// A claim once sent is seen through even if ctx ends meanwhile (for at
// most CallTimeout after it ended): the server may commit it after a
// client that gave up has gone, and its effects would wait out their
// lease. perform hands them back uncalled instead. While ctx lives, the
// claim has no deadline of its own, as before.
func (w *Worker[TTx]) claim(ctx context.Context, k *kind, n int) ([]Effect, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(w.l.cfg.CallTimeout, cancel) })
	defer stop()
	now := w.l.now()
	return w.l.list(cctx, w.l.q.Claim, store.Micros(now), n, store.Micros(now.Add(w.l.cfg.Lease)), k.name)
}

// perform runs one claimed effect and records its outcome under its token.
func (w *Worker[TTx]) perform(ctx context.Context, c *completer[TTx], queued func(), k *kind, e Effect) {
	handed := false // the completion went to c, which counts the call done
	defer func() {
		if !handed {
			c.calling.Add(-1)
		}
	}()
	// The effect's logger is built only when something is logged: With
	// formats its attributes, a cost per effect on the success path.
	log := func() *slog.Logger {
		return w.log.With("effect_key", e.Key, "kind", k.name, "attempt", e.Attempts, "token", e.Token)
	}
	// The exits before the call record on a context of their own, made
	// only when one is taken: the call's outcome gets its own below.
	finaliseCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), w.finalise)
	}
	if ctx.Err() != nil {
		// Claimed as the worker stopped: hand it back uncalled, the
		// attempt not counted and its last error kept.
		fctx, fcancel := finaliseCtx()
		defer fcancel()
		var last error
		if e.LastError != "" {
			last = errors.New(e.LastError)
		}
		if rerr := w.l.release(fctx, e.Key, e.Token, w.l.now(), last, true); rerr != nil {
			w.logFinalise(fctx, log(), "release", rerr)
		}
		return
	}
	if e.Attempts > k.maxAttempts {
		// Claimed again after the worker running it vanished too often.
		fctx, fcancel := finaliseCtx()
		defer fcancel()
		w.failEffect(fctx, log(), k, e, fmt.Errorf("effect: %d attempts exceed the maximum %d (workers lost mid-call)", e.Attempts, k.maxAttempts))
		return
	}
	if age := w.l.now().Sub(e.FirstAttemptAt); k.keyLifetime > 0 && age > k.keyLifetime {
		// The key may have reached the provider on an earlier attempt and
		// the provider may have forgotten it: a call now could perform the
		// effect a second time. Hold it for an operator instead.
		fctx, fcancel := finaliseCtx()
		defer fcancel()
		cause := fmt.Errorf("%w: key first sent %s ago, provider keeps keys %s; check the provider, then resolve or retry",
			ErrKeyExpired, age.Round(time.Second), k.keyLifetime)
		if err := w.l.hold(fctx, e.Key, e.Token, cause); err != nil {
			w.logFinalise(fctx, log(), "hold", err)
			return
		}
		w.cfg.Observer.EffectHeld(k.name)
		log().WarnContext(fctx, "effect held for reconciliation: provider key lifetime exceeded", "age", age, "key_lifetime", k.keyLifetime)
		return
	}
	sctx, span := startCall(obs.FromRow(ctx, e.TraceParent, e.TraceState), w.tr, e)
	cctx, cancel := context.WithTimeout(sctx, w.l.cfg.CallTimeout)
	res, err := callSafely(sctx, w.log, e.Key, func() ([]byte, error) { return k.perform(cctx, e.Key, e.Payload) })
	cancel()
	// The outcome is recorded on a context started now: one started before
	// the call ran out during any call longer than it (CallTimeout defaults
	// to Lease/2), and the completion, failure or release was lost until
	// the lease ended and the provider was called again.
	octx, ocancel := finaliseCtx()
	defer ocancel()
	octx = trace.ContextWithSpan(octx, span)
	if k.breaker != nil {
		k.breaker.Record(err)
	}
	switch {
	case err == nil:
		endCall(span, outcomeCompleted, nil)
		handed = true
		if cerr := c.complete(octx, e.Key, e.Token, res, queued); cerr != nil {
			w.logFinalise(octx, log(), "complete", cerr)
		}
	case ctx.Err() != nil && !idem.IsPermanent(err):
		// The worker is stopping: hand the effect back, attempt not counted.
		endCall(span, outcomeReleased, err)
		if rerr := w.l.release(octx, e.Key, e.Token, w.l.now(), err, true); rerr != nil {
			w.logFinalise(octx, log(), "release", rerr)
		}
	case idem.IsPermanent(err) || e.Attempts >= k.maxAttempts:
		endCall(span, outcomeFailed, err)
		w.failEffect(octx, log(), k, e, err)
	default:
		endCall(span, outcomeRetry, err)
		next := w.l.now().Add(w.backoff(e.Attempts))
		log().DebugContext(octx, "transient failure, retrying later", "error", err, "next", next)
		if rerr := w.l.release(octx, e.Key, e.Token, next, err, false); rerr != nil {
			w.logFinalise(octx, log(), "release", rerr)
		}
	}
}

func (w *Worker[TTx]) failEffect(ctx context.Context, log *slog.Logger, k *kind, e Effect, cause error) {
	var hook func(ctx context.Context, tx TTx, e Effect) error
	if w.cfg.OnFailed != nil {
		hook = func(ctx context.Context, tx TTx, e Effect) error {
			// A panic of the hook rolls the transaction back and is retried
			// like the hook's error.
			return panics.Call(ctx, log, "OnFailed panicked; the effect is retried later",
				func() error { return w.cfg.OnFailed(ctx, tx, e, cause) })
		}
	}
	_, err := w.l.fail(ctx, e.Key, e.Token, cause, hook)
	if err == nil {
		log.WarnContext(ctx, "effect failed", "error", cause, "class", idem.ErrorClass(cause))
		return
	}
	if lease.Lost(err) {
		w.logFinalise(ctx, log, "fail", err)
		return
	}
	// The hook or the store failed: keep the effect alive and try later.
	log.ErrorContext(ctx, "cannot mark the effect failed; retrying later", "error", err, "cause", cause)
	next := w.l.now().Add(w.backoff(e.Attempts))
	if rerr := w.l.release(ctx, e.Key, e.Token, next, errors.Join(cause, err), false); rerr != nil {
		w.logFinalise(ctx, log, "release", rerr)
	}
}

func (w *Worker[TTx]) logFinalise(ctx context.Context, log *slog.Logger, op string, err error) {
	if lease.Lost(err) {
		log.WarnContext(ctx, "lease lost before "+op+"; another worker owns the effect, nothing written", "error", err)
		return
	}
	log.ErrorContext(ctx, op+" failed; the effect is retried once its lease runs out", "error", err)
}

// FullJitter returns an exponential backoff with full jitter: a uniformly
// random delay in [0, min(max, base·2^(attempt-1))], computed by idem's one
// backoff, [idem.Backoff]. Safe for concurrent use.
func FullJitter(base, max time.Duration) func(attempt int) time.Duration {
	b := idem.Backoff{Base: base, Max: max}
	return func(attempt int) time.Duration { return b.Delay(attempt, nil) }
}
