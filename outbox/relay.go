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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/store"
)

// RelayConfig configures a Relay. Zero fields take their defaults.
type RelayConfig struct {
	// Name identifies this relay instance in claimed_by and in logs.
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
	// ClaimTTL is the lease on claimed events (and, on SQLite, on the
	// single-writer relay lease). If the relay dies, its events are claimed
	// again after ClaimTTL and published again with the same ids.
	// Defaults to 30s.
	ClaimTTL time.Duration
	// PublishTimeout bounds one Publish call; it must be shorter than
	// ClaimTTL. Defaults to ClaimTTL/3.
	PublishTimeout time.Duration
	// MaxAttempts is how many failed publish attempts an event gets before
	// it is parked. Attempts are only counted when the failure is the
	// event's own (see Relay); a broker that is down counts no attempts.
	// Defaults to 20.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the exponential backoff with full
	// jitter between attempts of an event, and the relay's pause while the
	// broker is unavailable. Default to 100ms and 1m.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// DisableListen turns off PostgreSQL LISTEN/NOTIFY wake-ups (the relay
	// then only polls). LISTEN needs the pgxstore driver (it uses
	// PgxPool()); with the database/sql driver the relay always polls.
	DisableListen bool
	// LeaseName names the SQLite single-writer lease row; relays sharing a
	// name take turns. Defaults to "relay". Unused on PostgreSQL.
	LeaseName string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives the relay's logs. Defaults to discarding.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.relay.publish spans,
	// one per published event, each a child of the context stored with its
	// row (Event.TraceParent) and injected into the message's traceparent
	// and tracestate headers. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// DuplicateWindow declares the broker's dedup window on the message id
	// (JetStream: the stream's Duplicates, jetstream.StreamHorizon reads
	// it). When the relay's [Relay.RetrySpan] outlives it, NewRelay logs a
	// warning: a republish after the window is stored twice by the broker
	// (the inbox still deduplicates it). 0: not declared, not checked.
	DuplicateWindow time.Duration

	// OnPublished is called after events were acknowledged by the broker
	// and marked published. Hooks run on the relay goroutine: keep them
	// fast and do not retain the slice.
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
// on one database (PostgreSQL: claims with FOR UPDATE SKIP LOCKED and a
// lease; SQLite: one at a time, through a lease row). Its methods are safe
// for concurrent use; Run runs once at a time.
//
// Each round claims up to BatchSize due events in seq order that no earlier
// unpublished event of the same key blocks, publishes them in one Publish
// call, and marks them published after the broker ack. Rounds are
// pipelined: while a batch is published, one transaction marks the
// previous (acked) batch published and claims the next batch (on
// PostgreSQL with the pgx driver, that transaction is one round trip). If the batch fails,
// its events are published one at a time to find the failing ones: a failed
// event gets an attempt counted, a backoff, and is parked after MaxAttempts
// (at once for an [idem.Permanent] error); the later events of its key wait.
// If nothing at all can be published, no error is permanent and none of the
// failed events failed before, the broker is taken to be down: no attempt is
// counted, the claims are released and the relay pauses (exponential backoff)
// before trying again, so an outage does not park fresh events. An event that
// already failed while the broker accepted others keeps counting attempts
// (it is the suspect), so a poison event is parked even when it is alone.
type Relay[TTx any] struct {
	d    store.Driver[TTx]
	pub  broker.Publisher
	cfg  RelayConfig
	q    queries
	log  *slog.Logger
	tr   trace.Tracer
	pool *pgxpool.Pool // LISTEN; nil when polling only
	pgx  *pgxpool.Pool // one-round-trip claims; nil unless the pgx driver

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
		return nil, idem.InvalidOptionf("outbox: nil driver or publisher")
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
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, cfg.ClaimTTL/3)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 20)
	cfg.BaseBackoff = cmp.Or(cfg.BaseBackoff, 100*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, time.Minute)
	cfg.LeaseName = cmp.Or(cfg.LeaseName, "relay")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(cfg.Name) > idem.MaxKeyLen:
		return nil, idem.InvalidOptionf("outbox: relay name longer than %d bytes", idem.MaxKeyLen)
	case cfg.BatchSize < 0 || cfg.BatchSize > 10000:
		return nil, idem.InvalidOptionf("outbox: BatchSize %d out of range 1..10000", cfg.BatchSize)
	case cfg.PollInterval < 0 || cfg.Recheck < 0 || cfg.ClaimTTL < 0 || cfg.PublishTimeout < 0 || cfg.BaseBackoff < 0 || cfg.MaxBackoff < 0:
		return nil, idem.InvalidOptionf("outbox: negative duration")
	case cfg.PublishTimeout >= cfg.ClaimTTL:
		return nil, idem.InvalidOptionf("outbox: PublishTimeout %v must be shorter than ClaimTTL %v", cfg.PublishTimeout, cfg.ClaimTTL)
	case cfg.MaxAttempts < 1:
		return nil, idem.InvalidOptionf("outbox: MaxAttempts %d < 1", cfg.MaxAttempts)
	case cfg.MaxBackoff < cfg.BaseBackoff:
		return nil, idem.InvalidOptionf("outbox: MaxBackoff %v < BaseBackoff %v", cfg.MaxBackoff, cfg.BaseBackoff)
	}
	r := &Relay[TTx]{
		d:    d,
		pub:  pub,
		cfg:  cfg,
		q:    newQueries(d.Dialect(), d.Names(), d.Table),
		log:  obs.Logger(cfg.Logger).With("component", "idem.outbox.relay", "relay", cfg.Name),
		tr:   obs.Tracer(cfg.TracerProvider),
		wake: make(chan struct{}, 1),
		rnd:  mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64())),
	}
	r.warnHorizon()
	if p, ok := any(d).(interface{ PgxPool() *pgxpool.Pool }); ok && d.Dialect() == store.Postgres {
		r.pgx = p.PgxPool()
		if !cfg.DisableListen {
			r.pool = r.pgx
		}
	}
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
	var wg sync.WaitGroup
	lctx, stopListen := context.WithCancel(ctx)
	if r.pool != nil {
		wg.Go(func() { r.listen(lctx) })
	}
	defer func() {
		stopListen()
		wg.Wait()
		if r.q.dialect == store.SQLite {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = r.d.Pool().Exec(cctx, r.q.releaseLease, r.cfg.LeaseName, r.cfg.Name)
			cancel()
		}
	}()
	r.log.InfoContext(ctx, "relay started", "listen", r.pool != nil)
	streak := 0
	recheck := time.Duration(0) // next empty-round delay below PollInterval; 0 = none
	var p pipe
	for {
		if ctx.Err() != nil {
			r.flush(ctx, &p)
			r.log.InfoContext(ctx, "relay stopped")
			return nil
		}
		n, err := r.round(ctx, &p)
		switch {
		case errors.Is(err, errCrashed):
			return err
		case err != nil && ctx.Err() == nil:
			streak++
			d := r.pause(streak)
			if errors.Is(err, errBrokerDown) {
				r.log.WarnContext(ctx, "broker unavailable, pausing", "pause", d, "err", err)
			} else {
				r.log.ErrorContext(ctx, "relay round failed", "pause", d, "err", err)
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
			if sleep(ctx, d, r.wake) {
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
func (r *Relay[TTx]) backoff(n int) time.Duration {
	ceil := r.backoffCeil(n)
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.rnd.Int64N(int64(ceil) + 1))
}

// pause is the relay-level delay after failed rounds: at least BaseBackoff.
func (r *Relay[TTx]) pause(streak int) time.Duration {
	return min(r.cfg.BaseBackoff+r.backoff(streak), r.cfg.MaxBackoff)
}

// pipe is the relay's pipeline state between rounds.
type pipe struct {
	acked []Event // acked by the broker, not yet marked published
	next  []Event // claimed, not yet published
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
func (r *Relay[TTx]) round(ctx context.Context, p *pipe) (int, error) {
	cur := p.next
	p.next = nil
	if len(cur) == 0 {
		evs, err := r.claimTx(ctx, p.acked)
		if err != nil {
			return 0, err
		}
		r.published(ctx, p.acked)
		p.acked = nil
		if cur = evs; len(cur) == 0 {
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
	next, cerr := r.claimTx(ctx, p.acked)
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
		p.next = next
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
	r.log.DebugContext(ctx, "batch publish failed, publishing one by one", "events", len(cur), "acked", acked, "err", pr.err)
	return len(cur), r.fallback(ctx, cur[:acked], cur[acked:])
}

// flush marks acked events and releases claimed, unpublished ones (clean
// shutdown).
func (r *Relay[TTx]) flush(ctx context.Context, p *pipe) {
	if len(p.acked) == 0 && len(p.next) == 0 {
		return
	}
	if err := r.settle(ctx, p.acked, nil, p.next); err != nil {
		r.log.WarnContext(ctx, "shutdown: could not settle; the claims expire after ClaimTTL", "err", err)
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
// goroutine than the relay's); it returns the events the broker reported as
// duplicates.
func (r *Relay[TTx]) publishQuiet(ctx context.Context, evs []Event, msgs []idem.Message) (n int, dups []Event, err error) {
	spans := r.startSpans(ctx, evs, msgs)
	defer func() { endSpans(spans, evs, n, dups, err) }()
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
				"seq", evs[i].Seq, "id", evs[i].ID, "position", pr.Position)
			dups = append(dups, evs[i])
		}
	}
	if err == nil && n < len(msgs) {
		err = fmt.Errorf("outbox: broker returned %d results for %d messages", n, len(msgs))
	}
	return n, dups, err
}

func (r *Relay[TTx]) duplicates(ctx context.Context, dups []Event) {
	if r.cfg.OnDuplicate == nil {
		return
	}
	for _, e := range dups {
		r.cfg.OnDuplicate(ctx, e)
	}
}

type failure struct {
	ev  Event
	err error
}

// fallback publishes evs one at a time after the batch failed; done are
// the events of the batch the broker had accepted before the failure.
func (r *Relay[TTx]) fallback(ctx context.Context, done, evs []Event) error {
	var rest []Event
	var failed []failure
	blocked := map[string]bool{}
	ok, transient, permanent := len(done), 0, 0
	for i, e := range evs {
		if ctx.Err() != nil || (ok == 0 && transient >= 2) {
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
	return r.claimTx(ctx, nil)
}

// claimTx marks done (events acked by the broker) published and claims the
// next batch, in one transaction; it returns the batch sorted by seq. On
// error nothing was marked: done must be marked later (or its claims
// expire and the events are published again with the same ids).
//
// On PostgreSQL the transaction first takes the exclusive relay lock in a
// statement of its own, so the claim's snapshot (taken after the lock is
// granted) sees every earlier row of a key in its settled state; the mark
// runs before the claim, so the claim sees those rows published. With the
// pgx driver the whole transaction (BEGIN, lock, mark, claim, COMMIT) is
// sent as one pipelined batch: one round trip per batch of events.
func (r *Relay[TTx]) claimTx(ctx context.Context, done []Event) ([]Event, error) {
	now := r.cfg.Now()
	nowUS, until := store.Micros(now), store.Micros(now.Add(r.cfg.ClaimTTL))
	timeout := strconv.FormatInt(max(1, r.cfg.PublishTimeout.Milliseconds()), 10)
	var evs []Event
	if r.pgx != nil {
		var err error
		evs, err = r.claimPgx(ctx, done, nowUS, until, timeout)
		if err != nil {
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		sortBySeq(evs)
		return evs, nil
	}
	err := store.InTx(ctx, r.d, func(tx TTx) error {
		evs = evs[:0]
		q := r.d.Tx(tx)
		if r.q.dialect == store.Postgres {
			// Never hold the claim lock longer than a claim's lease: a
			// stalled claim statement is cancelled and the round retried
			// (a backstop). The planner settings pin the claim's plan to
			// ordered index scans (see queries.go).
			if _, err := q.Exec(ctx, r.q.claimPlan, r.q.ns64, timeout); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		if len(done) > 0 {
			if _, err := q.Exec(ctx, r.q.markDone, nowUS, r.q.seqArg(seqsOf(done))); err != nil {
				return fmt.Errorf("mark published: %w", err)
			}
		}
		if r.q.dialect == store.SQLite {
			n, err := q.Exec(ctx, r.q.acquireLease, r.cfg.LeaseName, r.cfg.Name, until, nowUS)
			if err != nil {
				return fmt.Errorf("lease: %w", err)
			}
			if n == 0 {
				return nil // another relay holds the lease
			}
		}
		rows, err := q.Query(ctx, r.q.claim, r.cfg.Name, until, nowUS, r.cfg.BatchSize)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanEvent(rows)
			if err != nil {
				return err
			}
			evs = append(evs, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	sortBySeq(evs)
	return evs, nil
}

// claimPgx is claimTx's transaction as one pipelined pgx batch. Any error
// leaves the transaction rolled back (the connection is discarded when it
// is not idle).
func (r *Relay[TTx]) claimPgx(ctx context.Context, done []Event, nowUS, until int64, timeout string) (evs []Event, err error) {
	conn, err := r.pgx.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = conn.Hijack().Close(cctx)
			cancel()
			return
		}
		conn.Release()
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(r.q.claimPlan, r.q.ns64, timeout)
	if len(done) > 0 {
		b.Queue(r.q.markDone, nowUS, seqsOf(done))
	}
	b.Queue(r.q.claim, r.cfg.Name, until, nowUS, r.cfg.BatchSize)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if len(done) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("mark published: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		evs = append(evs, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	if tag.String() != "COMMIT" {
		return nil, fmt.Errorf("commit: transaction ended with %q", tag.String())
	}
	return evs, nil
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
// shutdown never leaves a finished batch unmarked.
func (r *Relay[TTx]) settle(ctx context.Context, done []Event, failed []failure, rest []Event) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()
	now := r.cfg.Now()
	type parked struct {
		ev  Event
		err error
	}
	var retried []failure
	var nexts []time.Time
	var parks []parked
	err := store.InTx(sctx, r.d, func(tx TTx) error {
		retried, nexts, parks = retried[:0], nexts[:0], parks[:0]
		q := r.d.Tx(tx)
		if r.q.dialect == store.Postgres {
			if _, err := q.Exec(sctx, r.q.lockOwner, r.q.ns64); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		if len(done) > 0 {
			if _, err := q.Exec(sctx, r.q.markDone, store.Micros(now), r.q.seqArg(seqsOf(done))); err != nil {
				return fmt.Errorf("mark published: %w", err)
			}
		}
		for _, f := range failed {
			attempt := f.ev.Attempts + 1
			state, next := "pending", now.Add(r.backoff(attempt))
			if attempt >= r.cfg.MaxAttempts || idem.IsPermanent(f.err) {
				state, next = "parked", time.Time{}
			}
			msg := f.err.Error()
			if len(msg) > 2000 {
				msg = msg[:2000]
			}
			n, err := q.Exec(sctx, r.q.fail, r.cfg.Name, f.ev.Seq, state, msg, store.Micros(next))
			if err != nil {
				return fmt.Errorf("record failure: %w", err)
			}
			if n == 0 {
				continue // our claim was taken over; the new owner decides
			}
			f.ev.Attempts = attempt
			if state == "parked" {
				parks = append(parks, parked{f.ev, f.err})
			} else {
				retried = append(retried, f)
				nexts = append(nexts, next)
			}
		}
		if len(rest) > 0 {
			if _, err := q.Exec(sctx, r.q.release, r.cfg.Name, r.q.seqArg(seqsOf(rest))); err != nil {
				return fmt.Errorf("release: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		// The claims expire after ClaimTTL; the events are published again.
		return fmt.Errorf("outbox: settle: %w", err)
	}
	r.published(ctx, done)
	for i, f := range retried {
		r.log.WarnContext(ctx, "publish failed, will retry", "seq", f.ev.Seq, "id", f.ev.ID, "key", f.ev.Key,
			"attempt", f.ev.Attempts, "next", nexts[i], "err", f.err)
		if r.cfg.OnRetry != nil {
			r.cfg.OnRetry(ctx, f.ev, f.err, nexts[i])
		}
	}
	for _, p := range parks {
		r.log.ErrorContext(ctx, "event parked: its ordering key is blocked until it is retried",
			"seq", p.ev.Seq, "id", p.ev.ID, "source", p.ev.Source, "key", p.ev.Key, "attempts", p.ev.Attempts, "err", p.err)
		if r.cfg.OnParked != nil {
			r.cfg.OnParked(ctx, p.ev, p.err)
		}
	}
	return nil
}

// published reports events that were acked and marked published.
func (r *Relay[TTx]) published(ctx context.Context, done []Event) {
	if len(done) == 0 {
		return
	}
	r.log.DebugContext(ctx, "published", "events", len(done), "first_seq", done[0].Seq, "last_seq", done[len(done)-1].Seq)
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

// listen holds a dedicated connection in LISTEN and wakes the relay on
// every notification; it reconnects after errors and wakes the relay after
// each (re)connect to cover notifications missed meanwhile.
func (r *Relay[TTx]) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.WarnContext(ctx, "LISTEN connection lost, polling until reconnected", "err", err)
		sleep(ctx, r.cfg.PollInterval, nil)
	}
}

func (r *Relay[TTx]) listenOnce(ctx context.Context) error {
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // never hand a listening connection back to the pool
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.q.channel}.Sanitize()); err != nil {
		return err
	}
	r.Notify()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		r.Notify()
	}
}
