package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/errtext"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// RelayConfig configures a Relay. Zero fields take their defaults.
type RelayConfig struct {
	// Name identifies this relay instance in claimed_by (on MySQL as a
	// 16-byte digest of the name, which keeps the column's width) and in
	// logs.
	// Defaults to "<hostname>-<pid>-<random>".
	Name string
	// BatchSize is the most events claimed and published at once.
	// Defaults to 512.
	BatchSize int
	// PollInterval is how long the relay sleeps when there is nothing to
	// publish, unless woken earlier by LISTEN/NOTIFY or [Relay.Notify]. It is
	// the fallback that bounds latency when a notification is lost.
	// Defaults to 500ms.
	PollInterval time.Duration
	// Recheck is how soon the relay looks again after a wake-up or a
	// round that published something, when that look found nothing; the
	// delay doubles on each empty look until it reaches PollInterval. It
	// catches transactions that commit shortly after a notifying one
	// without notifying themselves (see Config.NotifyInterval). Defaults to
	// 10ms.
	Recheck time.Duration
	// Linger is how long a relay that keeps up with its producers waits
	// before it claims the next batch, so that events committed meanwhile
	// go out together: after a batch of fewer than a quarter of BatchSize,
	// the next claim starts Linger later. The wait overlaps the batch's
	// publish, so an event already claimed is not held back, and a relay
	// woken from sleep claims at once: the linger adds at most Linger to
	// an event's wait for its claim, and up to twice Linger more to its
	// mark (and OnPublished), which a later claim's transaction writes
	// after that claim's own linger. Without it
	// a steady trickle of events makes the relay run one claim, publish
	// and mark per handful of events, and those rounds take the
	// database's CPU from the transactions that enqueue. Defaults to 2ms,
	// or PollInterval if that is shorter; a negative value turns it off.
	// At most PollInterval, and two PublishTimeouts and two Lingers must
	// be shorter than ClaimTTL (the claims hold a batch until it is
	// marked).
	Linger time.Duration
	// ClaimTTL is the lease on claimed events (and, on SQLite, on the
	// single-writer relay lease). If the relay dies, its events are claimed
	// again after ClaimTTL and published again with the same ids.
	// Defaults to 30s.
	ClaimTTL time.Duration
	// PublishTimeout bounds one Publish call; it must be shorter than
	// half of ClaimTTL (a batch is claimed while the batch before it is
	// being published, then published itself). Defaults to ClaimTTL/3.
	PublishTimeout time.Duration
	// MaxAttempts is how many failed publish attempts an event gets before
	// it is parked. Attempts are only counted when the failure is the
	// event's own (see Relay); a broker that is down counts no attempts.
	// Defaults to 20.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the exponential backoff with full
	// jitter (idem.Backoff{Base, Max}) between attempts of an event, and
	// the relay's pause while the broker is unavailable. Default to 100ms
	// and 1m.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// DisableListen turns off PostgreSQL LISTEN/NOTIFY wake-ups (the relay
	// then only polls). LISTEN needs a driver that declares
	// SupportsListener (pgxstore); with the database/sql driver the relay
	// always polls. With LISTEN on pgxstore the relay holds one pool
	// connection while it runs and does all its work on it (see Relay);
	// without, each round borrows one.
	DisableListen bool
	// LeaseName names the SQLite single-writer lease row; relays sharing a
	// name take turns. Defaults to "relay"; at most idem.MaxKeyLen bytes.
	// Unused on PostgreSQL.
	LeaseName string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives the relay's logs (a parked event at level Error). Defaults to
	// slog.Default(), so a parked event is never silent.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.relay.publish spans,
	// one per published event, each a child of the context stored with its
	// row (Event.TraceParent) and injected into the message's traceparent
	// and tracestate headers. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Observer, if set, counts published, duplicate and parked events and
	// observes the duration of each broker publish
	// (idem_outbox_published_total, idem_outbox_duplicates_total,
	// idem_outbox_parked_total, idem_outbox_publish_duration_seconds);
	// pass an *idemmetrics.Metrics. The On* hooks below still run: they
	// receive the events themselves.
	Observer idem.Observer

	// DuplicateWindow declares the broker's dedup window on the message id
	// (JetStream: the stream's Duplicates, jetstream.StreamHorizon reads
	// it). When the relay's [Relay.RetrySpan] outlives it, NewRelay logs a
	// warning: a republish after the window is stored twice by the broker
	// (the inbox still deduplicates it). 0: not declared, not checked.
	DuplicateWindow time.Duration

	// DeletePublished deletes an event's row once the broker acknowledged
	// it, instead of marking it completed. The mark is the relay's most
	// expensive write (on PostgreSQL a new row version and two index
	// entries, about three WAL records per event; the delete writes one),
	// and deleted rows leave nothing for Outbox.Prune to do.
	//
	// What is given up, for events with a caller-chosen id (an id idem
	// generates never repeats): once published, the (source, id) no longer
	// deduplicates a later EnqueueTx. That enqueue is queued and published
	// again under the same id, after the newer events of its key; the
	// broker's duplicate window and the consumers' inbox absorb the repeat
	// only within their horizons, and a different payload under that id is
	// no longer refused with idem.ErrFingerprintMismatch. Published events
	// also leave what reads the table: `idem stats` and the console count
	// none, and a published event's state is "not found". Default false:
	// mark.
	DeletePublished bool

	// OnPublished is called after events were acknowledged by the broker
	// and marked published (or deleted: DeletePublished). Hooks run on the
	// relay goroutine: keep them fast and do not retain the slice.
	OnPublished func(ctx context.Context, events []Event)
	// OnRetry is called when a publish attempt of ev failed and it will be
	// retried at next.
	OnRetry func(ctx context.Context, ev Event, err error, next time.Time)
	// OnDuplicate is called for an event the broker reported as already
	// stored inside its dedup window (a republish after a crash between
	// the ack and the mark). Needs a publisher implementing
	// broker.ResultPublisher (JetStream, memory with DedupWindow).
	OnDuplicate func(ctx context.Context, ev Event)
	// OnParked is called when ev was parked after its last attempt (or a
	// permanent error). Alert on it: the event's key is blocked.
	OnParked func(ctx context.Context, ev Event, err error)
}

// ErrRelayRunning is returned by Run when the relay is already running.
var ErrRelayRunning = errors.New("outbox: relay already running")

// Relay publishes committed outbox events to a broker. Several relays may run
// on one database (PostgreSQL: claims serialised by an advisory lock, each
// a lease on its rows; SQLite: one at a time, through a lease row). Its methods are safe
// for concurrent use; Run runs once at a time.
//
// Each round claims up to BatchSize due events in seq order that no earlier
// unpublished event of the same key blocks, publishes them in one Publish
// call, and marks them published (or deletes them: DeletePublished) after
// the broker ack. Rounds are
// pipelined: while a batch is published, one transaction marks the
// previous (acked) batch published and claims the next batch (with a
// driver that pipelines, pgxstore, that transaction is one round trip). If
// the batch fails, its events are published one at a time to find the
// failing ones: a failed event gets an attempt counted, a backoff, and is
// parked after MaxAttempts (at once for an [idem.Permanent] error); the
// later events of its key wait.
// If nothing at all can be published, no error is permanent and none of the
// failed events failed before, the broker is taken to be down: no attempt is
// counted, the claims are released and the relay pauses (exponential backoff)
// before trying again, so an outage does not park fresh events. An event that
// already failed while the broker accepted others keeps counting attempts
// (it is the suspect), so a poison event is parked even when it is alone.
//
// On PostgreSQL through pgxstore, Run holds one connection of the pool
// while it runs: it listens on it, sleeps on it and runs its claims and
// settles on it, so a round never waits for the pool to lend or open a
// connection (a pool at its limit, or one whose idle connections a burst
// of requests took, delayed the rounds of a relay that borrowed one per
// round by as long as opening a connection takes). If that connection
// breaks, Run opens another before its next round; while LISTEN fails it
// polls through the pool and tries again every PollInterval. Rounds borrow
// a pool connection each with DisableListen, with pgx's simple protocol
// (no pipelining), or when the pool's settings keep its listener from
// running statements (store.QueryListener; pgxstore's Listen says when).
//
// Claims are leases of internal/lease's vocabulary on pending rows
// (claimed_by, claim_until): a claim whose lease ran out is taken over by
// the next claim (the Retake policy: the event is published again with the
// same id), and a failure is recorded only under the relay's own claim
// (lease.Fence).
type Relay[TTx any] struct {
	d      store.Driver[TTx]
	pub    broker.Publisher
	cfg    RelayConfig
	q      sqlset.Outbox
	keys   lockKeys
	log    *slog.Logger
	tr     trace.Tracer
	bo     idem.Backoff
	listen bool // LISTEN/NOTIFY wake-ups (the driver has a listener)

	// conn is Run's own connection when the driver's listener also runs
	// statements (store.QueryListener, pgxstore): Run listens on it,
	// sleeps on it and runs its claims and settles on it, so a round
	// never waits for the pool to lend (or open) a connection, and the
	// relay holds one connection instead of two. nil while Run polls
	// through the pool until it reconnects (connAt: the next attempt).
	// Only Run's goroutine touches them.
	conn   store.QueryListener
	connAt time.Time
	// runDone is Run's ctx.Done(). Once it is closed the run is stopping,
	// and a connection that breaks then broke because of that: not worth
	// a warning. Set by Run before anything reads it.
	runDone <-chan struct{}

	wake    chan struct{}
	running atomic.Bool
	mu      sync.Mutex // protects rnd
	rnd     *mrand.Rand

	// afterPublish is a test failpoint: returning true simulates a crash
	// after the broker ack and before the mark.
	afterPublish func([]Event) bool
}

// errCrashed is returned by Run when the afterPublish failpoint fired.
var errCrashed = errors.New("outbox: simulated crash after publish")

// errBrokerDown reports a round in which the broker accepted nothing.
var errBrokerDown = errors.New("outbox: broker unavailable")

// NewRelay returns a relay that publishes d's outbox to pub. Defaults are
// applied and validated (errors wrap [idem.ErrInvalidOption]).
func NewRelay[TTx any](d store.Driver[TTx], pub broker.Publisher, cfg RelayConfig) (*Relay[TTx], error) {
	if d == nil || pub == nil {
		return nil, checks.Optionf("outbox: nil driver or publisher")
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		cfg.Name = cmp.Or(host, "relay") + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 512)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 500*time.Millisecond)
	cfg.Recheck = cmp.Or(cfg.Recheck, 10*time.Millisecond)
	cfg.ClaimTTL = cmp.Or(cfg.ClaimTTL, 30*time.Second)
	if cfg.Linger == 0 {
		cfg.Linger = min(2*time.Millisecond, cfg.PollInterval)
	}
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, cfg.ClaimTTL/3)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 20)
	cfg.BaseBackoff = cmp.Or(cfg.BaseBackoff, 100*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, time.Minute)
	cfg.LeaseName = cmp.Or(cfg.LeaseName, "relay")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Observer = obs.Observer(cfg.Observer)
	switch {
	case len(cfg.Name) > idem.MaxKeyLen:
		return nil, checks.Optionf("outbox: relay name longer than %d bytes", idem.MaxKeyLen)
	case len(cfg.LeaseName) > idem.MaxKeyLen:
		return nil, checks.Optionf("outbox: lease name longer than %d bytes", idem.MaxKeyLen)
	case cfg.BatchSize < 0 || cfg.BatchSize > 10000:
		return nil, checks.Optionf("outbox: BatchSize %d out of range 1..10000", cfg.BatchSize)
	case cfg.PollInterval < 0 || cfg.Recheck < 0 || cfg.ClaimTTL < 0 || cfg.PublishTimeout < 0 || cfg.BaseBackoff < 0 || cfg.MaxBackoff < 0:
		return nil, checks.Optionf("outbox: negative duration")
	case cfg.Linger > cfg.PollInterval:
		return nil, checks.Optionf("outbox: Linger %v longer than PollInterval %v", cfg.Linger, cfg.PollInterval)
	case 2*cfg.PublishTimeout >= cfg.ClaimTTL:
		// A batch is claimed while the one before it is being published,
		// then published itself: its claims must outlast two publishes.
		return nil, checks.Optionf("outbox: PublishTimeout %v must be shorter than half of ClaimTTL %v (a batch is claimed while the batch before it is published)", cfg.PublishTimeout, cfg.ClaimTTL)
	case 2*(cfg.PublishTimeout+max(cfg.Linger, 0)) >= cfg.ClaimTTL:
		// A batch is marked by a later round's claim, after two lingers
		// (its own round's and the marking round's): until then its
		// claims hold it from another relay.
		return nil, checks.Optionf("outbox: two PublishTimeouts and two Lingers (%v, %v) must be shorter than ClaimTTL %v (a published batch is marked by a later claim, after two lingers)", cfg.PublishTimeout, cfg.Linger, cfg.ClaimTTL)
	case cfg.MaxAttempts < 1:
		return nil, checks.Optionf("outbox: MaxAttempts %d < 1", cfg.MaxAttempts)
	case cfg.DeletePublished && d.Statements().Outbox.DeletePublished == "":
		return nil, checks.Optionf("outbox: DeletePublished: the %s dialect has no statement for it (sqlset.Outbox.DeletePublished)", d.Dialect())
	case cfg.MaxBackoff < cfg.BaseBackoff:
		return nil, checks.Optionf("outbox: MaxBackoff %v < BaseBackoff %v", cfg.MaxBackoff, cfg.BaseBackoff)
	}
	r := &Relay[TTx]{
		d:      d,
		pub:    pub,
		cfg:    cfg,
		q:      d.Statements().Outbox,
		keys:   newLockKeys(d.Names()),
		log:    obs.Component(cfg.Logger, "idem.outbox.relay", "relay", cfg.Name),
		tr:     obs.Tracer(cfg.TracerProvider),
		bo:     idem.Backoff{Base: cfg.BaseBackoff, Max: cfg.MaxBackoff},
		listen: !cfg.DisableListen && d.SupportsListener(),
		wake:   make(chan struct{}, 1),
		rnd:    mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64())),
	}
	r.warnHorizon()
	return r, nil
}

// Name returns the relay's instance name.
func (r *Relay[TTx]) Name() string { return r.cfg.Name }

// Notify wakes the relay at once (if it is waiting). Call it after
// committing a transaction that enqueued events when the relay runs in the
// same process and cannot be woken by LISTEN/NOTIFY (SQLite, database/sql
// on PostgreSQL). It never blocks.
func (r *Relay[TTx]) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is done, then returns nil after a clean shutdown:
// an in-flight batch is either published and marked, or its claim is
// released so another relay takes it over at once (SQLite: the lease is
// released too). Database errors are logged and retried with backoff; Run
// only returns early for ErrRelayRunning.
//
// On crash (no clean shutdown), claimed events are taken over after
// ClaimTTL and published again with the same ids; events already acked by
// the broker are then duplicates that the broker's dedup window or the
// consumer's inbox absorbs.
func (r *Relay[TTx]) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRelayRunning
	}
	defer r.running.Store(false)
	r.runDone = ctx.Done()
	var wg sync.WaitGroup
	lctx, stopListen := context.WithCancel(ctx)
	// Run works on a connection of its own (see Relay.conn) when the
	// driver pipelines and listens; it falls back to a listening goroutine
	// if the listener turns out not to run statements.
	own := r.listen && r.d.SupportsPipeline()
	if own {
		if !r.reconnect(ctx) {
			own = false
			wg.Go(func() { r.listenLoop(lctx) })
		}
	} else if r.listen {
		wg.Go(func() { r.listenLoop(lctx) })
	}
	defer func() {
		stopListen()
		wg.Wait()
		r.closeConn(ctx)
		if r.q.ReleaseLease != "" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = r.d.Pool().Exec(cctx, r.q.ReleaseLease, r.cfg.LeaseName, r.cfg.Name)
			cancel()
		}
	}()
	r.log.InfoContext(ctx, "relay started", "listen", r.listen, "own_connection", own)
	streak := 0
	recheck := time.Duration(0) // next empty-round delay below PollInterval; 0 = none
	var p pipe
	for {
		if ctx.Err() != nil {
			r.flush(ctx, &p)
			r.log.InfoContext(ctx, "relay stopped")
			return nil
		}
		if own && r.conn == nil && !time.Now().Before(r.connAt) && !r.reconnect(ctx) {
			own = false
			wg.Go(func() { r.listenLoop(lctx) })
		}
		if r.conn != nil {
			// This round's claim sees what the notifications kept so far
			// announced: drop them, so none piles up while rounds run
			// back to back (or fail, as while the broker is down).
			r.conn.Drain()
		}
		n, err := r.round(ctx, &p)
		switch {
		case errors.Is(err, errCrashed):
			return err
		case err != nil && ctx.Err() == nil:
			streak++
			d := r.pause(streak)
			if errors.Is(err, errBrokerDown) {
				r.log.WarnContext(ctx, "broker unavailable, pausing", "pause", d, "error", err)
			} else {
				r.log.ErrorContext(ctx, "relay round failed", "pause", d, "error", err)
			}
			sleep(ctx, d, nil)
		case err != nil:
		case n > 0:
			streak = 0
			recheck = r.cfg.Recheck
		default:
			streak = 0
			d := r.cfg.PollInterval
			if recheck > 0 && recheck < d {
				d, recheck = recheck, recheck*2
			} else {
				recheck = 0
			}
			woke := false
			if r.conn != nil {
				woke = r.waitConn(ctx, d)
			} else {
				woke = sleep(ctx, d, r.wake)
			}
			if woke {
				recheck = r.cfg.Recheck
			}
		}
	}
}

// sleep waits d, until ctx is done or a wake-up; it reports the wake-up.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
		return true
	}
	return false
}

// backoff returns a full-jitter delay for the n-th attempt (n ≥ 1).
func (r *Relay[TTx]) backoff(n int) time.Duration { return r.bo.Delay(n, r.float) }

// float draws from the relay's own source (Delay's rnd).
func (r *Relay[TTx]) float() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rnd.Float64()
}

// pause is the relay-level delay after failed rounds: at least BaseBackoff.
func (r *Relay[TTx]) pause(streak int) time.Duration {
	return min(r.cfg.BaseBackoff+r.backoff(streak), r.cfg.MaxBackoff)
}

// pipe is the relay's pipeline state between rounds.
type pipe struct {
	acked     []Event   // acked by the broker, not yet marked published
	next      []Event   // claimed, not yet published
	nextUntil time.Time // when next's claims run out
}

// round publishes one batch and returns how many events it claimed.
//
// Pipelining: while a batch is being published, the next one is claimed in
// a transaction that also marks the previous (acked) batch published. The
// next batch cannot hold a key of the batch in flight (its rows are claimed,
// hence blockers) and is published only after the batch in flight was
// acked, so per-key order is unchanged; a row is still marked published only
// after its broker ack. If the batch in flight fails, the next batch is
// released unpublished and the failure is handled as without pipelining.
// After a small batch the next claim waits RelayConfig.Linger first, while
// the batch is being published.
func (r *Relay[TTx]) round(ctx context.Context, p *pipe) (int, error) {
	cur, until := p.next, p.nextUntil
	p.next = nil
	if len(cur) == 0 {
		evs, u, err := r.claimTx(ctx, p.acked)
		if err != nil {
			return 0, err
		}
		r.published(ctx, p.acked)
		p.acked = nil
		if cur, until = evs, u; len(cur) == 0 {
			return 0, nil
		}
	}
	type result struct {
		acked int
		dups  []Event
		err   error
	}
	res := make(chan result, 1)
	go func() {
		n, dups, err := r.publishQuiet(ctx, cur, msgsOf(cur))
		res <- result{n, dups, err}
	}()
	if r.cfg.Linger > 0 && 4*len(cur) < r.cfg.BatchSize {
		// Keeping up: let the next batch gather (RelayConfig.Linger).
		sleep(ctx, r.cfg.Linger, nil)
	}
	next, nextUntil, cerr := r.claimTx(ctx, p.acked)
	if cerr == nil {
		r.published(ctx, p.acked)
		p.acked = nil
	}
	pr := <-res
	r.duplicates(ctx, pr.dups)
	if pr.err == nil {
		if r.afterPublish != nil && r.afterPublish(cur) {
			return 0, errCrashed
		}
		p.acked = append(p.acked, cur...)
		p.next, p.nextUntil = next, nextUntil
		return len(cur), cerr
	}
	// The batch failed: settle what is known, release the next batch.
	if err := r.settle(ctx, p.acked, nil, next); err != nil {
		return 0, err
	}
	p.acked = nil
	acked := pr.acked
	if ctx.Err() != nil {
		return 0, r.settle(ctx, cur[:acked], nil, cur[acked:])
	}
	r.log.DebugContext(ctx, "batch publish failed, publishing one by one", "events", len(cur), "acked", acked, "error", pr.err)
	return len(cur), r.fallback(ctx, cur[:acked], cur[acked:], until.Add(-r.cfg.PublishTimeout))
}

// flush marks acked events and releases claimed, unpublished ones (clean
// shutdown).
func (r *Relay[TTx]) flush(ctx context.Context, p *pipe) {
	if len(p.acked) == 0 && len(p.next) == 0 {
		return
	}
	if err := r.settle(ctx, p.acked, nil, p.next); err != nil {
		r.log.WarnContext(ctx, "shutdown: could not settle; the claims expire after ClaimTTL", "error", err)
	}
	p.acked, p.next = nil, nil
}

// publish publishes msgs (of evs) in one call and returns how many of them
// (a prefix) the broker is known to have accepted. With a
// broker.ResultPublisher, broker-side duplicates are reported to OnDuplicate.
func (r *Relay[TTx]) publish(ctx context.Context, evs []Event, msgs []idem.Message) (int, error) {
	n, dups, err := r.publishQuiet(ctx, evs, msgs)
	r.duplicates(ctx, dups)
	return n, err
}

// publishQuiet is publish without running hooks (it may run on another
// goroutine than the relay's: only the Observer, safe for concurrent use,
// gets the publish's duration); it returns the events the broker reported
// as duplicates.
func (r *Relay[TTx]) publishQuiet(ctx context.Context, evs []Event, msgs []idem.Message) (n int, dups []Event, err error) {
	spans := r.startSpans(ctx, evs, msgs)
	t0 := time.Now()
	defer func() {
		r.cfg.Observer.OutboxPublishDuration(time.Since(t0))
		endSpans(spans, evs, n, dups, err)
	}()
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	rp, ok := r.pub.(broker.ResultPublisher)
	if !ok {
		if err := r.pub.Publish(pctx, msgs...); err != nil {
			return 0, nil, err
		}
		return len(msgs), nil, nil
	}
	res, err := rp.PublishResults(pctx, msgs...)
	for i, pr := range res {
		if i >= len(evs) || pr.ID != evs[i].ID {
			break // not a prefix of ours: trust nothing more
		}
		n++
		if pr.Duplicate {
			r.log.DebugContext(ctx, "broker reported a duplicate (republish inside its dedup window)",
				"seq", evs[i].Seq, "event_id", evs[i].ID, "position", pr.Position)
			dups = append(dups, evs[i])
		}
	}
	if err == nil && n < len(msgs) {
		err = fmt.Errorf("outbox: broker returned %d results for %d messages", n, len(msgs))
	}
	return n, dups, err
}

func (r *Relay[TTx]) duplicates(ctx context.Context, dups []Event) {
	for _, e := range dups {
		r.cfg.Observer.OutboxDuplicate(ctx)
		if r.cfg.OnDuplicate != nil {
			r.cfg.OnDuplicate(ctx, e)
		}
	}
}

type failure struct {
	ev  Event
	err error
}

// fallback publishes evs one at a time after the batch failed; done are
// the events of the batch the broker had accepted before the failure. It
// starts no publish after stop, when a publish could outlast the batch's
// claims (another relay could then take them over and publish the same
// events beside this one): the events left are released.
func (r *Relay[TTx]) fallback(ctx context.Context, done, evs []Event, stop time.Time) error {
	var rest []Event
	var failed []failure
	blocked := map[string]bool{}
	ok, transient, permanent := len(done), 0, 0
	for i, e := range evs {
		if ctx.Err() != nil || (ok == 0 && transient >= 2) {
			rest = append(rest, evs[i:]...)
			break
		}
		if !r.cfg.Now().Before(stop) {
			r.log.WarnContext(ctx, "the batch's claims run out before it was published one by one; releasing the rest",
				"published", ok, "released", len(evs)-i)
			rest = append(rest, evs[i:]...)
			break
		}
		if e.Key != "" && blocked[e.Key] {
			rest = append(rest, e)
			continue
		}
		_, err := r.publish(ctx, evs[i:i+1], []idem.Message{e.Message()})
		switch {
		case err == nil:
			ok++
			done = append(done, e)
			continue
		case ctx.Err() != nil:
			rest = append(rest, evs[i:]...)
		case idem.IsPermanent(err):
			permanent++
			failed = append(failed, failure{e, err})
		default:
			transient++
			failed = append(failed, failure{e, err})
		}
		if ctx.Err() != nil {
			break
		}
		if e.Key != "" {
			blocked[e.Key] = true
		}
	}
	if ok == 0 && permanent == 0 && len(failed) > 0 && !slices.ContainsFunc(failed, func(f failure) bool { return f.ev.Attempts > 0 }) {
		// Nothing went through and no failure is known to be the event's
		// own: the broker is taken to be down. Count no attempts.
		for _, f := range failed {
			rest = append(rest, f.ev)
		}
		if err := r.settle(ctx, nil, nil, rest); err != nil {
			return err
		}
		return fmt.Errorf("%w: %w", errBrokerDown, failed[0].err)
	}
	return r.settle(ctx, done, failed, rest)
}

// claim claims the next batch, sorted by seq (marking nothing).
func (r *Relay[TTx]) claim(ctx context.Context) ([]Event, error) {
	evs, _, err := r.claimTx(ctx, nil)
	return evs, err
}

// claimTx marks done (events acked by the broker) published and claims the
// next batch, in one transaction; it returns the batch sorted by seq and
// when its claims run out. On
// error nothing was marked: done must be marked later (or its claims
// expire and the events are published again with the same ids).
//
// With advisory locks (PostgreSQL) the transaction first takes the
// exclusive relay lock in a statement of its own (sqlset.Outbox.LockClaim),
// so the claim's snapshot (taken after the lock is granted) sees every
// earlier row of a key in its settled state; the mark runs before the
// claim, so the claim sees those rows published. The lock statement also
// bounds the claim by a statement timeout (never hold the claim lock
// longer than a claim's lease: a stalled claim is cancelled and the round
// retried) and pins its plan to ordered index scans. With a driver that
// pipelines (pgxstore) the whole transaction is one batch: one round trip
// per batch of events. On SQLite the relays take turns through the
// single-writer lease instead: a relay that does not hold it claims
// nothing.
//
// A claim sent is seen through even when ctx is done meanwhile (for at
// most PublishTimeout, the claim's statement timeout): the server may
// commit it after a client that gave up has gone, and nothing would
// release those rows until ClaimTTL ran out, holding back their ordering
// keys on every relay. Its events reach the pipe, and a shutdown releases
// them. A claim is not started once ctx is done.
func (r *Relay[TTx]) claimTx(ctx context.Context, done []Event) ([]Event, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("outbox: claim: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()
	now := r.cfg.Now()
	expiry := now.Add(r.cfg.ClaimTTL)
	nowUS, until := store.Micros(now), store.Micros(expiry)
	var evs []Event
	var stmts []store.Stmt
	if r.q.LockClaim != "" {
		timeout := strconv.FormatInt(max(1, r.cfg.PublishTimeout.Milliseconds()), 10)
		stmts = append(stmts, store.Stmt{SQL: r.q.LockClaim, Args: []any{r.keys.relay, timeout}})
	}
	if len(done) > 0 {
		stmts = append(stmts, r.mark(nowUS, done))
	}
	claim := store.Stmt{SQL: r.q.Claim, Args: []any{r.cfg.Name, until, nowUS, r.cfg.BatchSize}, Rows: func(rows store.Rows) error {
		evs = evs[:0]
		for rows.Next() {
			e, err := scanEvent(rows)
			if err != nil {
				return err
			}
			evs = append(evs, e)
		}
		return rows.Err()
	}}
	var err error
	if r.q.AcquireLease == "" {
		err = r.atomically(ctx, append(stmts, claim))
	} else {
		err = store.InTx(ctx, r.d, func(tx TTx) error {
			q := r.d.Tx(tx)
			if err := r.d.SendBatch(ctx, q, stmts); err != nil {
				return err
			}
			n, err := q.Exec(ctx, r.q.AcquireLease, r.cfg.LeaseName, r.cfg.Name, until, nowUS)
			if err != nil {
				return fmt.Errorf("lease: %w", err)
			}
			if n == 0 {
				return nil // another relay holds the lease
			}
			return r.d.SendBatch(ctx, q, []store.Stmt{claim})
		})
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("outbox: claim: %w", err)
	}
	sortBySeq(evs)
	return evs, expiry, nil
}

// mark is the statement that records done as published at nowUS: the
// mark (Complete), or with DeletePublished the delete.
func (r *Relay[TTx]) mark(nowUS int64, done []Event) store.Stmt {
	seqs := seqsArg(seqsOf(done))
	if r.cfg.DeletePublished {
		return store.Stmt{SQL: r.q.DeletePublished, Args: []any{seqs}}
	}
	return store.Stmt{SQL: r.q.Complete, Args: []any{nowUS, seqs}}
}

// stopping reports whether Run's context is done.
func (r *Relay[TTx]) stopping() bool {
	select {
	case <-r.runDone:
		return true
	default:
		return false
	}
}

// atomically runs stmts as one transaction. With a driver that pipelines,
// they are one batch (on Run's own connection, else on the pool): one
// round trip, and one implicit transaction that commits when the last
// statement succeeded and rolls back on any error (store.Driver.SendBatch);
// otherwise they run one by one in a transaction of their own.
func (r *Relay[TTx]) atomically(ctx context.Context, stmts []store.Stmt) error {
	if r.d.SupportsPipeline() {
		if r.conn == nil {
			return r.d.SendBatch(ctx, r.d.Pool(), stmts)
		}
		err := r.d.SendBatch(ctx, r.conn.Querier(), stmts)
		if err != nil && r.conn.Broken() {
			// Lost, or left mid-protocol: open a new one before the next
			// round. (A statement's error leaves it usable.) Stopping
			// the run breaks it too, and Run returns: no warning then.
			if !r.stopping() {
				r.log.WarnContext(ctx, "the relay's connection broke, reconnecting", "error", err)
			}
			r.closeConn(ctx)
			r.connAt = time.Time{}
		}
		return err
	}
	return store.InTx(ctx, r.d, func(tx TTx) error { return r.d.SendBatch(ctx, r.d.Tx(tx), stmts) })
}

func scanEvent(rows interface{ Scan(...any) error }) (Event, error) {
	var e Event
	var t int64
	var headers string
	if err := rows.Scan(&e.Seq, &e.Source, &e.ID, &e.Type, &e.Topic, &e.Subject, &t,
		&e.DataContentType, &e.Key, &headers, &e.Payload, &e.Attempts, &e.TraceParent, &e.TraceState); err != nil {
		return e, err
	}
	e.Time = store.FromMicros(t)
	if headers != "" && headers != "{}" {
		if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
			return e, fmt.Errorf("headers of seq %d: %w", e.Seq, err)
		}
	}
	return e, nil
}

// settle records the outcome of a round in one transaction: done events are
// marked published, failed ones get an attempt (and are parked after the
// last), rest are released untouched. It runs even when ctx is done, so a
// shutdown never leaves a finished batch unmarked. The failure records are
// fenced by the claim (lease.Fence): an event whose claim was taken over
// is left to its new owner. With a driver that pipelines it is one round
// trip.
func (r *Relay[TTx]) settle(ctx context.Context, done []Event, failed []failure, rest []Event) error {
	if len(done) == 0 && len(failed) == 0 && len(rest) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()
	now := r.cfg.Now()
	var stmts []store.Stmt
	if r.q.LockShared != "" {
		stmts = append(stmts, store.Stmt{SQL: r.q.LockShared, Args: []any{r.keys.relay}})
	}
	if len(done) > 0 {
		stmts = append(stmts, r.mark(store.Micros(now), done))
	}
	type outcome struct {
		failure
		park     bool
		next     time.Time
		affected int64
	}
	outs := make([]outcome, len(failed))
	for i, f := range failed {
		o := outcome{failure: f}
		attempt := f.ev.Attempts + 1
		state := lease.Pending
		o.next = now.Add(r.backoff(attempt))
		if attempt >= r.cfg.MaxAttempts || idem.IsPermanent(f.err) {
			state, o.park, o.next = lease.Failed, true, time.Time{}
		}
		o.ev.Attempts = attempt
		msg := errtext.Of(f.err) // storable: rune-safe cut, no NUL
		outs[i] = o
		stmts = append(stmts, store.Stmt{SQL: r.q.Fail, Args: []any{r.cfg.Name, f.ev.Seq, state, msg, store.Micros(o.next)},
			Affected: &outs[i].affected})
	}
	if len(rest) > 0 {
		stmts = append(stmts, store.Stmt{SQL: r.q.Release, Args: []any{r.cfg.Name, seqsArg(seqsOf(rest))}})
	}
	if err := r.atomically(sctx, stmts); err != nil {
		// The claims expire after ClaimTTL; the events are published again.
		return fmt.Errorf("outbox: settle: %w", err)
	}
	r.published(ctx, done)
	var parks []outcome
	for _, o := range outs {
		if err := lease.Fence(o.affected, nil, "outbox: failure record of the claim on seq", o.ev.Seq); err != nil {
			// Our claim was taken over; the new owner decides.
			r.log.DebugContext(ctx, "claim taken over before its failure was recorded", "seq", o.ev.Seq, "event_id", o.ev.ID, "error", err)
			continue
		}
		if o.park {
			parks = append(parks, o)
			continue
		}
		r.log.WarnContext(ctx, "publish failed, will retry", "seq", o.ev.Seq, "event_id", o.ev.ID, "ordering_key", o.ev.Key,
			"attempt", o.ev.Attempts, "next", o.next, "error", o.err)
		if r.cfg.OnRetry != nil {
			r.cfg.OnRetry(ctx, o.ev, o.err, o.next)
		}
	}
	for _, p := range parks {
		r.log.ErrorContext(ctx, "event parked: its ordering key is blocked until it is retried",
			"seq", p.ev.Seq, "event_id", p.ev.ID, "source", p.ev.Source, "ordering_key", p.ev.Key, "attempts", p.ev.Attempts, "error", p.err)
		r.cfg.Observer.OutboxParked(ctx, idem.ErrorClass(p.err))
		if r.cfg.OnParked != nil {
			r.cfg.OnParked(ctx, p.ev, p.err)
		}
	}
	return nil
}

// published reports events that were acked and marked published (or
// deleted).
func (r *Relay[TTx]) published(ctx context.Context, done []Event) {
	if len(done) == 0 {
		return
	}
	r.log.DebugContext(ctx, "published", "events", len(done), "first_seq", done[0].Seq, "last_seq", done[len(done)-1].Seq)
	r.cfg.Observer.OutboxPublished(len(done))
	if r.cfg.OnPublished != nil {
		r.cfg.OnPublished(ctx, done)
	}
}

func msgsOf(evs []Event) []idem.Message {
	msgs := make([]idem.Message, len(evs))
	for i, e := range evs {
		msgs[i] = e.Message()
	}
	return msgs
}

func seqsOf(evs []Event) []int64 {
	s := make([]int64, len(evs))
	for i, e := range evs {
		s[i] = e.Seq
	}
	return s
}

// reconnect opens Run's own connection (see Relay.conn). It reports false
// when the driver's listener cannot run statements (store.QueryListener):
// Run then listens in a goroutine and rounds borrow pool connections. When
// LISTEN fails, the relay polls through the pool and tries again after
// PollInterval. The round that follows runs at once, covering
// notifications sent while the relay did not listen.
func (r *Relay[TTx]) reconnect(ctx context.Context) bool {
	l, err := r.d.Listen(ctx, r.keys.channel)
	if err != nil {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, "could not open the relay's connection, polling until it is back", "error", err)
		}
		r.connAt = time.Now().Add(r.cfg.PollInterval)
		return true
	}
	ql, ok := l.(store.QueryListener)
	if !ok {
		r.closeListener(ctx, l)
		return false
	}
	r.conn = ql
	return true
}

// closeConn closes Run's own connection, if open.
func (r *Relay[TTx]) closeConn(ctx context.Context) {
	if r.conn != nil {
		r.closeListener(ctx, r.conn)
		r.conn = nil
	}
}

func (r *Relay[TTx]) closeListener(ctx context.Context, l store.Listener) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = l.Close(cctx)
}

// waitConn sleeps up to d on Run's own connection; a notification (one
// that arrived during the last round included), Notify or the end of ctx
// ends it early. It reports a wake-up. A wait that fails closes the
// connection; the relay opens a new one before its next round.
func (r *Relay[TTx]) waitConn(ctx context.Context, d time.Duration) bool {
	if r.conn.Drain() {
		return true // committed while the last round ran: look again now
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var woke atomic.Bool // Notify: the goroutine took r.wake
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-r.wake:
			woke.Store(true)
			cancel()
		case <-stop:
		}
	}()
	_, err := r.conn.Wait(wctx)
	close(stop)
	<-stopped
	switch {
	case err == nil:
		r.conn.Drain() // one look covers every notification so far
		return true
	case woke.Load():
		return true
	case wctx.Err() != nil:
		return false // slept d, or ctx ended
	}
	if ctx.Err() == nil {
		r.log.WarnContext(ctx, "the relay's connection was lost, reconnecting", "error", err)
	}
	r.closeConn(ctx)
	r.connAt = time.Time{} // reconnect before the next round
	return false
}

// listenLoop holds a dedicated connection in LISTEN (store.Driver.Listen)
// and wakes the relay on every notification; it reconnects after errors
// and wakes the relay after each (re)connect to cover notifications missed
// meanwhile.
func (r *Relay[TTx]) listenLoop(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.WarnContext(ctx, "LISTEN connection lost, polling until reconnected", "error", err)
		sleep(ctx, r.cfg.PollInterval, nil)
	}
}

func (r *Relay[TTx]) listenOnce(ctx context.Context) error {
	l, err := r.d.Listen(ctx, r.keys.channel)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = l.Close(cctx)
	}()
	r.Notify()
	for {
		if _, err := l.Wait(ctx); err != nil {
			return err
		}
		r.Notify()
	}
}
