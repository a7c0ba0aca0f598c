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

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/store"
)

// RelayConfig configures a Relay. Zero fields take their defaults.
type RelayConfig struct {
	// Name identifies this relay instance in claimed_by and in logs.
	// Defaults to "<hostname>-<pid>-<random>".
	Name string
	// BatchSize is the most events claimed and published at once.
	// Defaults to 256.
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
// call, and marks them published after the broker ack. If the batch fails,
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
	pool *pgxpool.Pool // LISTEN; nil when polling only

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
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 256)
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
		log:  cfg.Logger.With("component", "idem.outbox.relay", "relay", cfg.Name),
		wake: make(chan struct{}, 1),
		rnd:  mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64())),
	}
	if p, ok := any(d).(interface{ PgxPool() *pgxpool.Pool }); ok && d.Dialect() == store.Postgres && !cfg.DisableListen {
		r.pool = p.PgxPool()
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
	for {
		if ctx.Err() != nil {
			r.log.InfoContext(ctx, "relay stopped")
			return nil
		}
		n, err := r.round(ctx)
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
	ceil := r.cfg.BaseBackoff << min(n-1, 30)
	if ceil <= 0 || ceil > r.cfg.MaxBackoff {
		ceil = r.cfg.MaxBackoff
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.rnd.Int64N(int64(ceil) + 1))
}

// pause is the relay-level delay after failed rounds: at least BaseBackoff.
func (r *Relay[TTx]) pause(streak int) time.Duration {
	return min(r.cfg.BaseBackoff+r.backoff(streak), r.cfg.MaxBackoff)
}

// round claims, publishes and settles one batch; it returns how many
// events it claimed.
func (r *Relay[TTx]) round(ctx context.Context) (int, error) {
	evs, err := r.claim(ctx)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	acked, err := r.publish(ctx, evs, msgsOf(evs))
	if err == nil {
		if r.afterPublish != nil && r.afterPublish(evs) {
			return 0, errCrashed
		}
		return len(evs), r.settle(ctx, evs, nil, nil)
	}
	if ctx.Err() != nil {
		return 0, r.settle(ctx, evs[:acked], nil, evs[acked:])
	}
	r.log.DebugContext(ctx, "batch publish failed, publishing one by one", "events", len(evs), "acked", acked, "err", err)
	return len(evs), r.fallback(ctx, evs[:acked], evs[acked:])
}

// publish publishes msgs (of evs) in one call and returns how many of them
// (a prefix) the broker is known to have accepted. With a
// broker.ResultPublisher, broker-side duplicates are reported to OnDuplicate.
func (r *Relay[TTx]) publish(ctx context.Context, evs []Event, msgs []idem.Message) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	rp, ok := r.pub.(broker.ResultPublisher)
	if !ok {
		if err := r.pub.Publish(pctx, msgs...); err != nil {
			return 0, err
		}
		return len(msgs), nil
	}
	res, err := rp.PublishResults(pctx, msgs...)
	n := 0
	for i, pr := range res {
		if i >= len(evs) || pr.ID != evs[i].ID {
			break // not a prefix of ours: trust nothing more
		}
		n++
		if pr.Duplicate {
			r.log.DebugContext(ctx, "broker reported a duplicate (republish inside its dedup window)",
				"seq", evs[i].Seq, "id", evs[i].ID, "position", pr.Position)
			if r.cfg.OnDuplicate != nil {
				r.cfg.OnDuplicate(ctx, evs[i])
			}
		}
	}
	if err == nil && n < len(msgs) {
		err = fmt.Errorf("outbox: broker returned %d results for %d messages", n, len(msgs))
	}
	if err != nil {
		return n, err
	}
	return n, nil
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

// claim claims the next batch, sorted by seq.
func (r *Relay[TTx]) claim(ctx context.Context) ([]Event, error) {
	now := r.cfg.Now()
	nowUS, until := store.Micros(now), store.Micros(now.Add(r.cfg.ClaimTTL))
	var evs []Event
	err := store.InTx(ctx, r.d, func(tx TTx) error {
		evs = evs[:0]
		q := r.d.Tx(tx)
		if r.q.dialect == store.Postgres {
			// Claims are serialized against each other and against owners
			// settling their claims, so the claim's snapshot sees every
			// earlier row of a key in its settled state (see package doc).
			if _, err := q.Exec(ctx, r.q.lockClaim, r.q.ns64); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			// Never hold the claim lock longer than a claim's lease: a
			// stalled claim statement is cancelled and the round retried
			// (a backstop). The planner settings pin the claim's plan to
			// ordered index scans (see queries.go).
			if _, err := q.Exec(ctx, r.q.claimPlan, strconv.FormatInt(max(1, r.cfg.PublishTimeout.Milliseconds()), 10)); err != nil {
				return fmt.Errorf("statement timeout: %w", err)
			}
		} else {
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
			var e Event
			var t int64
			var headers string
			if err := rows.Scan(&e.Seq, &e.Source, &e.ID, &e.Type, &e.Topic, &e.Subject, &t,
				&e.DataContentType, &e.Key, &headers, &e.Payload, &e.Attempts); err != nil {
				return err
			}
			e.Time = store.FromMicros(t)
			if headers != "" && headers != "{}" {
				if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
					return fmt.Errorf("headers of seq %d: %w", e.Seq, err)
				}
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
	if len(done) > 0 {
		r.log.DebugContext(ctx, "published", "events", len(done), "first_seq", done[0].Seq, "last_seq", done[len(done)-1].Seq)
		if r.cfg.OnPublished != nil {
			r.cfg.OnPublished(ctx, done)
		}
	}
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
