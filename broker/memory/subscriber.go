package memory

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/origin"
)

// Subscribe returns a subscriber of the named subscription (consumer
// group) on subject, creating the subscription on first use. A new
// subscription starts at the beginning of the subject: it sees every
// message stored before and after. Subscribers sharing a group compete for
// its messages (each message goes to one of them at a time); different
// groups each get every message.
func (b *Broker) Subscribe(subject, name string) (*Subscriber, error) {
	if subject == "" || name == "" {
		return nil, checks.Optionf("memory: Subscribe needs a subject and a group")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, broker.ErrClosed
	}
	t := b.topicLocked(subject)
	g := t.groups[name]
	if g == nil {
		g = &group{}
		for _, e := range t.log {
			g.pending = append(g.pending, &item{e: e, readyAt: e.visibleAt})
		}
		t.groups[name] = g
	}
	return &Subscriber{b: b, g: g}, nil
}

// Subscriber pulls deliveries from one subscription of a [Broker]. It
// implements [broker.Subscriber] and is safe for concurrent use.
type Subscriber struct {
	b      *Broker
	g      *group
	closed bool // protected by b.mu
}

// Fetch returns up to max deliveries (max < 1 means 1) in sequence order:
// messages never delivered, Nak'ed ones whose delay passed, and
// unacknowledged ones whose ack wait expired. It waits until one is
// available, maxWait passes (returning none and a nil error) or ctx is
// done (returning ctx's error).
func (s *Subscriber) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	max = cmpMax(max, 1)
	b := s.b
	deadline := time.Now().Add(maxWait)
	for {
		b.mu.Lock()
		if s.closed {
			b.mu.Unlock()
			return nil, broker.ErrClosed
		}
		if err := b.checkLocked(); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		now := time.Now()
		var out []broker.Delivery
		wake := deadline
		for _, it := range s.g.pending {
			if it.inflight && !now.Before(it.deadline) {
				it.inflight, it.readyAt = false, it.deadline
			}
			if it.inflight {
				wake = minTime(wake, it.deadline)
				continue
			}
			if md := b.cfg.MaxDeliver; md > 0 && it.attempts >= md {
				continue
			}
			if now.Before(it.readyAt) {
				wake = minTime(wake, it.readyAt)
				continue
			}
			if len(out) < max {
				out = append(out, s.deliverLocked(it, now))
			}
		}
		ch := b.changed
		b.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if !now.Before(deadline) {
			return nil, nil
		}
		timer := time.NewTimer(wake.Sub(now))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-ch:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func cmpMax(a, b int) int {
	if a < b {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *Subscriber) deliverLocked(it *item, now time.Time) *delivery {
	b := s.b
	b.tokens++
	it.attempts++
	it.inflight, it.deadline, it.token, it.owner = true, now.Add(b.cfg.AckWait), b.tokens, s
	b.stats.Delivered++
	if it.attempts > 1 {
		b.stats.Redelivered++
	}
	m := cloneMsg(it.e.msg)
	m.Attempt = it.attempts
	m.Position = strconv.FormatUint(it.e.seq, 10)
	return &delivery{s: s, it: it, token: it.token, msg: m}
}

// Close closes the subscriber. Its unacknowledged deliveries become
// available to the other subscribers of the group at once (a late Ack
// still settles them). The subscription itself persists.
func (s *Subscriber) Close() error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	now := time.Now()
	for _, it := range s.g.pending {
		if it.inflight && it.owner == s {
			it.inflight, it.readyAt = false, now
		}
	}
	b.notifyLocked()
	return nil
}

type delivery struct {
	s     *Subscriber
	it    *item
	token uint64
	msg   idem.Message
}

func (d *delivery) Message() idem.Message { return d.msg }

// Origin implements [broker.Locator]: the subject and the message's
// sequence number in the broker.
func (d *delivery) Origin() map[string]string {
	return map[string]string{origin.Subject: d.msg.Subject, origin.Seq: d.msg.Position}
}

// settle removes the item from its group. Called with b.mu held.
func (d *delivery) settleLocked() {
	g := d.s.g
	d.it.done = true
	if i := slices.Index(g.pending, d.it); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
	}
}

// Ack settles the message for good, even if it was redelivered since this
// delivery (a late ack of an earlier delivery is honoured, as in
// JetStream). Acking a settled message is a no-op.
func (d *delivery) Ack(ctx context.Context) error {
	return d.settle(func(st *Stats) { st.Acked++ })
}

// settle settles the message for good (Ack, Term) unless it already is,
// counting it with count.
func (d *delivery) settle(count func(*Stats)) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkLocked(); err != nil {
		return err
	}
	if d.it.done {
		return nil
	}
	d.settleLocked()
	count(&b.stats)
	return nil
}

// Nak makes the message available again after delay. It is ignored when
// the message was settled or redelivered since this delivery.
func (d *delivery) Nak(ctx context.Context, delay time.Duration) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkLocked(); err != nil {
		return err
	}
	if d.it.done || d.it.token != d.token || !d.it.inflight {
		return nil
	}
	d.it.inflight, d.it.readyAt = false, time.Now().Add(max(delay, 0))
	b.stats.Naked++
	b.notifyLocked()
	return nil
}

// Term settles the message for good without processing: it is never
// delivered again to this subscription. Terminating a settled message is a
// no-op.
func (d *delivery) Term(ctx context.Context) error {
	return d.settle(func(st *Stats) { st.Termed++ })
}
