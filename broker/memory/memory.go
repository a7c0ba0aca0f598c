// Package memory is an in-process broker for tests: a log per subject,
// named subscriptions (consumer groups) that each see every message, ack
// wait and redelivery of unacknowledged messages, Nak with delay, Term and
// attempt counting — plus faults injected on command: duplicate, reorder
// and delay publishes, redeliver now, replay a subscription, fail publishes
// and take the whole broker down.
//
//	b, err := memory.New(memory.Config{AckWait: time.Second})
//	sub, err := b.Subscribe("order-events", "billing") // a broker.Subscriber for consumer.New
//	b.DuplicateNext(1)                                 // the next publish is stored twice
//	err = b.Publisher().Publish(ctx, idem.Message{ID: "evt-1", Subject: "order-events", Payload: body})
//	b.RedeliverNow()                                   // every unacknowledged delivery comes back now
//	b.SetDown(true)                                    // publishes and fetches fail with broker.ErrUnavailable
//
// It keeps everything in memory and loses it all on Close; it is meant for
// unit tests and drills, never for production. A [Broker] is safe for
// concurrent use; the only randomness (reordering) comes from Config.Seed,
// so a run is reproducible given the same sequence of calls.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
)

// ErrInjected is wrapped (with [broker.ErrUnavailable]) by the errors of
// publishes failed on command with [Broker.FailNext].
var ErrInjected = errors.New("memory: injected failure")

// Config configures a [Broker].
type Config struct {
	// AckWait is how long a delivery may stay unacknowledged before it is
	// delivered again. Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver stops redelivering a message after this many deliveries
	// (the message stays unacknowledged, like a JetStream consumer with
	// MaxDeliver). Defaults to 0: unlimited.
	MaxDeliver int
	// DedupWindow makes Publish drop a message whose (subject, id) was
	// accepted less than DedupWindow ago and report it as a duplicate, like
	// JetStream's duplicate window. Defaults to 0: no dedup, every publish
	// is stored.
	DedupWindow time.Duration
	// Seed seeds the random reordering of [Broker.ReorderNext]. Defaults to 1.
	Seed uint64
	// Logger receives debug logs of injected faults. Defaults to discard.
	Logger *slog.Logger
}

// Stats counts what the broker did since it was created.
type Stats struct {
	Published   int // messages stored (duplicates injected by DuplicateNext included)
	Deduped     int // publishes dropped by the DedupWindow and reported as duplicates
	Delivered   int // deliveries, redeliveries included
	Redelivered int // deliveries with Attempt > 1
	Acked       int
	Naked       int
	Termed      int
}

// Broker is an in-memory broker. Create it with [New]; publish through
// [Broker.Publisher]; consume with [Broker.Subscribe]. Safe for concurrent use.
type Broker struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex // protects everything below
	rng      *rand.Rand
	topics   map[string]*topic
	changed  chan struct{} // closed and replaced on every change that may wake a Fetch
	closed   bool
	down     bool
	tokens   uint64
	seen     map[string]time.Time // subject + "\x00" + id → accepted at (DedupWindow)
	stats    Stats
	dupNext  int
	reorder  int
	held     []heldMsg
	delayN   int
	delayBy  time.Duration
	failN    int
	failKeep bool
}

type heldMsg struct {
	msg       idem.Message
	visibleAt time.Time
}

type topic struct {
	seq    uint64
	log    []*entry
	groups map[string]*group
}

type entry struct {
	seq       uint64
	msg       idem.Message
	visibleAt time.Time
}

type group struct {
	pending []*item // unsettled items in sequence order
}

type item struct {
	e        *entry
	attempts int
	readyAt  time.Time
	inflight bool
	deadline time.Time
	token    uint64
	owner    *Subscriber
	done     bool
}

// New returns an empty broker.
func New(cfg Config) (*Broker, error) {
	switch {
	case cfg.AckWait < 0:
		return nil, checks.Optionf("memory: negative AckWait %v", cfg.AckWait)
	case cfg.MaxDeliver < 0:
		return nil, checks.Optionf("memory: negative MaxDeliver %d", cfg.MaxDeliver)
	case cfg.DedupWindow < 0:
		return nil, checks.Optionf("memory: negative DedupWindow %v", cfg.DedupWindow)
	}
	cfg.AckWait = cmp.Or(cfg.AckWait, 30*time.Second)
	cfg.Seed = cmp.Or(cfg.Seed, 1)
	return &Broker{
		cfg:     cfg,
		log:     obs.Component(cfg.Logger, "broker/memory"),
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		topics:  map[string]*topic{},
		changed: make(chan struct{}),
		seen:    map[string]time.Time{},
	}, nil
}

// Close shuts the broker down: every publisher and subscriber then fails
// with [broker.ErrClosed], and all messages are gone.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.notifyLocked()
	return nil
}

// notifyLocked wakes every waiting Fetch.
func (b *Broker) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *Broker) topicLocked(subject string) *topic {
	t := b.topics[subject]
	if t == nil {
		t = &topic{groups: map[string]*group{}}
		b.topics[subject] = t
	}
	return t
}

func (b *Broker) checkLocked() error {
	switch {
	case b.closed:
		return broker.ErrClosed
	case b.down:
		return fmt.Errorf("memory: broker is down: %w", broker.ErrUnavailable)
	}
	return nil
}

// Publisher returns a publisher on the broker. Its Close only closes that
// publisher, not the broker. Safe for concurrent use.
func (b *Broker) Publisher() *Publisher { return &Publisher{b: b} }

// Publisher publishes to a [Broker]. It implements [broker.Publisher] and
// [broker.ResultPublisher].
type Publisher struct {
	b      *Broker
	mu     sync.Mutex
	closed bool // protected by mu
}

// Publish stores msgs in order; see [Publisher.PublishResults].
func (p *Publisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	_, err := p.PublishResults(ctx, msgs...)
	return err
}

// PublishResults stores msgs in order and reports, per message, its
// position (the subject's sequence number) and whether the DedupWindow
// dropped it as a duplicate. Every message needs a valid ID and a Subject;
// an invalid one fails the call (wrapping [idem.ErrInvalidInput]) before
// anything is stored. Injected faults apply here: see [Broker.FailNext],
// [Broker.SetDown], [Broker.DuplicateNext], [Broker.ReorderNext] and
// [Broker.DelayNext].
func (p *Publisher) PublishResults(ctx context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, broker.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := broker.ValidateMessages("memory", "subject", msgs); err != nil {
		return nil, err
	}
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkLocked(); err != nil {
		return nil, err
	}
	fail, keep := false, false
	if b.failN > 0 {
		b.failN--
		fail, keep = true, b.failKeep
		b.log.Debug("injected publish failure", "accepted", keep, "messages", len(msgs))
		if !keep {
			return nil, fmt.Errorf("%w: %w", broker.ErrUnavailable, ErrInjected)
		}
	}
	now := time.Now()
	res := make([]broker.PublishResult, 0, len(msgs))
	for _, m := range msgs {
		res = append(res, b.acceptLocked(m, now))
	}
	b.notifyLocked()
	if fail {
		return nil, fmt.Errorf("%w: %w (messages were stored)", broker.ErrUnavailable, ErrInjected)
	}
	return res, nil
}

func cloneMsg(m idem.Message) idem.Message {
	m.Headers = maps.Clone(m.Headers)
	m.Payload = slices.Clone(m.Payload)
	m.Attempt, m.Position = 0, ""
	return m
}

func (b *Broker) acceptLocked(m idem.Message, now time.Time) broker.PublishResult {
	m = cloneMsg(m)
	if w := b.cfg.DedupWindow; w > 0 {
		k := m.Subject + "\x00" + broker.DedupID(m)
		if at, ok := b.seen[k]; ok && now.Sub(at) < w {
			b.stats.Deduped++
			return broker.PublishResult{ID: m.ID, Duplicate: true}
		}
		b.seen[k] = now
		if len(b.seen) > 4096 { // prune expired ids now and then
			for k, at := range b.seen {
				if now.Sub(at) >= w {
					delete(b.seen, k)
				}
			}
		}
	}
	visibleAt := now
	if b.delayN > 0 {
		b.delayN--
		visibleAt = now.Add(b.delayBy)
	}
	copies := 1
	if b.dupNext > 0 {
		b.dupNext--
		copies = 2
	}
	if b.reorder > 0 {
		for range copies {
			b.held = append(b.held, heldMsg{m, visibleAt})
		}
		b.reorder--
		if b.reorder == 0 {
			b.releaseLocked()
		}
		return broker.PublishResult{ID: m.ID}
	}
	var seq uint64
	for range copies {
		seq = b.appendLocked(m, visibleAt)
	}
	return broker.PublishResult{ID: m.ID, Position: strconv.FormatUint(seq, 10)}
}

func (b *Broker) appendLocked(m idem.Message, visibleAt time.Time) uint64 {
	t := b.topicLocked(m.Subject)
	t.seq++
	e := &entry{seq: t.seq, msg: m, visibleAt: visibleAt}
	t.log = append(t.log, e)
	for _, g := range t.groups {
		g.pending = append(g.pending, &item{e: e, readyAt: visibleAt})
	}
	b.stats.Published++
	return t.seq
}

func (b *Broker) releaseLocked() {
	held := b.held
	b.held = nil
	b.rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for _, h := range held {
		b.appendLocked(h.msg, h.visibleAt)
	}
}

// Close closes this publisher; the broker stays up.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// DuplicateNext makes the broker store each of the next n published
// messages twice (same id, two sequence numbers), as a broker that
// redelivers or a producer that retried would. It bypasses the DedupWindow.
func (b *Broker) DuplicateNext(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dupNext = n
}

// ReorderNext holds the next n published messages (Publish still succeeds)
// and stores them in a random order, drawn from Config.Seed, once the n-th
// arrives or [Broker.Release] is called.
func (b *Broker) ReorderNext(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reorder = n
	if n <= 0 && len(b.held) > 0 {
		b.releaseLocked()
		b.notifyLocked()
	}
}

// Release stores the messages held by [Broker.ReorderNext] now, shuffled,
// and cancels the rest of the reordering.
func (b *Broker) Release() { b.ReorderNext(0) }

// DelayNext makes the next n published messages visible to subscribers
// only d after they were published.
func (b *Broker) DelayNext(n int, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delayN, b.delayBy = n, d
}

// FailNext makes the next n Publish calls fail with an error wrapping
// [broker.ErrUnavailable] and [ErrInjected]. With stored false nothing of
// the failed calls is stored (the broker was unreachable); with stored true
// the messages are stored but the caller still sees the error (the ack was
// lost), so its retry publishes them again.
func (b *Broker) FailNext(n int, stored bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failN, b.failKeep = n, stored
}

// SetDown simulates a broker outage: while down, Publish, Fetch, Ack, Nak
// and Term fail with an error wrapping [broker.ErrUnavailable]. Stored
// messages and unacknowledged deliveries survive the outage.
func (b *Broker) SetDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = down
	b.notifyLocked()
}

// RedeliverNow makes every unacknowledged delivery of every subscription
// available again at once, as if its ack wait had expired. The late Ack of
// such a delivery still settles the message.
func (b *Broker) RedeliverNow() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for _, t := range b.topics {
		for _, g := range t.groups {
			for _, it := range g.pending {
				if it.inflight {
					it.inflight, it.readyAt = false, now
				}
			}
		}
	}
	b.notifyLocked()
}

// Replay queues every stored message of subject again for the named
// subscription, acknowledged ones included, as a consumer reset to the
// start of the stream would. Messages still pending are not doubled.
// Replayed messages start again at Attempt 1.
func (b *Broker) Replay(subject, group string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[subject]
	if t == nil || t.groups[group] == nil {
		return fmt.Errorf("memory: no subscription %q on %q: %w", group, subject, idem.ErrNotFound)
	}
	g := t.groups[group]
	have := map[uint64]bool{}
	for _, it := range g.pending {
		have[it.e.seq] = true
	}
	now := time.Now()
	for _, e := range t.log {
		if !have[e.seq] {
			g.pending = append(g.pending, &item{e: e, readyAt: laterOf(now, e.visibleAt)})
		}
	}
	slices.SortFunc(g.pending, func(x, y *item) int { return cmp.Compare(x.e.seq, y.e.seq) })
	b.notifyLocked()
	return nil
}

// Messages returns a copy of every message stored on subject, in sequence
// order (injected duplicates included, deduped publishes excluded).
func (b *Broker) Messages(subject string) []idem.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[subject]
	if t == nil {
		return nil
	}
	out := make([]idem.Message, 0, len(t.log))
	for _, e := range t.log {
		m := cloneMsg(e.msg)
		m.Position = strconv.FormatUint(e.seq, 10)
		out = append(out, m)
	}
	return out
}

// Pending returns how many messages of subject the named subscription has
// not acknowledged or terminated yet (in flight or waiting).
func (b *Broker) Pending(subject, group string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[subject]; t != nil {
		if g := t.groups[group]; g != nil {
			return len(g.pending)
		}
	}
	return 0
}

// Stats returns the broker's counters.
func (b *Broker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
