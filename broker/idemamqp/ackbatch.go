package idemamqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/idemkit/idem/broker"
)

// acker sends a channel's basic.ack and basic.nack frames (an
// *amqp.Channel).
type acker interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

// settler settles the deliveries of one channel. It keeps the delivery
// tags handed out on the channel and not yet settled, so that a batch can
// be acked with one multiple ack that covers none of the others, and it
// sends every frame under mu: a multiple ack is never computed between
// another settlement's removal of its tag and the frame that settles it,
// which the broker would otherwise see after the multiple ack had already
// settled the tag (an unknown delivery tag closes the channel).
//
// A channel numbers its deliveries 1, 2, 3, … but they need not be handed
// out in that order: after Resume, a delivery of the cancelled consumer
// can still be on its way through pause.go's follow while Fetch hands out
// a later one. A multiple ack therefore also stops below the first tag not
// handed out yet (contig+1).
type settler struct {
	ch acker

	mu     sync.Mutex          // protects the fields below
	open   map[uint64]struct{} // handed out, not settled
	contig uint64              // every tag up to contig has been handed out
	ahead  map[uint64]struct{} // tags handed out above contig+1
}

func newSettler(ch acker) *settler {
	return &settler{ch: ch, open: map[uint64]struct{}{}, ahead: map[uint64]struct{}{}}
}

// track records a delivery handed out on the channel.
func (c *settler) track(tag uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open[tag] = struct{}{}
	switch {
	case tag == c.contig+1:
		c.contig++
		for {
			if _, ok := c.ahead[c.contig+1]; !ok {
				break
			}
			delete(c.ahead, c.contig+1)
			c.contig++
		}
	case tag > c.contig && len(c.ahead) < maxAhead:
		c.ahead[tag] = struct{}{}
	}
}

// maxAhead bounds settler.ahead. A gap lasts only while a delivery is on
// its way through follow; if one never came, contig would stop there
// (multiple acks then stop below it, as they must) and ahead would grow
// for the channel's life without this bound.
const maxAhead = 4096

// settle acks or nacks one delivery.
func (c *settler) settle(tag uint64, nack, requeue bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, tag)
	if nack {
		return c.ch.Nack(tag, false, requeue)
	}
	return c.ch.Ack(tag, false)
}

// ackAll acks tags (distinct, each of a delivery the caller has marked
// settled) and returns the error of each, in tags' order. The tags below
// every other unsettled delivery of the channel, and below the first tag
// not handed out yet, are acked with one multiple ack on the highest of
// them; the others one by one.
func (c *settler) ackAll(tags []uint64) []error {
	errs := make([]error, len(tags))
	order := make([]int, len(tags))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(tags[a], tags[b]) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range tags {
		delete(c.open, t)
	}
	// The first unsettled delivery left out of the batch, and the first
	// delivery not handed out yet, bound the run a multiple ack may cover.
	bound := c.contig + 1
	for t := range c.open {
		bound = min(bound, t)
	}
	run := 0
	for run < len(order) && tags[order[run]] < bound {
		run++
	}
	rest := order
	if run >= 2 {
		err := c.ch.Ack(tags[order[run-1]], true)
		for _, i := range order[:run] {
			errs[i] = err
		}
		rest = order[run:]
	}
	for _, i := range rest {
		errs[i] = c.ch.Ack(tags[i], false)
	}
	return errs
}

// AckBatch acks ds with as few frames as the channel allows: the
// deliveries of one channel whose tags lie below every other unsettled
// delivery of that channel (and below every delivery not handed out yet)
// are acked with one multiple ack (basic.ack with multiple set, on the
// highest of their tags), the others one by one. A consumer that settles
// its batches in delivery order sends one frame per batch; a batch above
// another batch's unsettled deliveries (concurrent workers) is acked one
// delivery at a time.
//
// As with Ack, AMQP acks are not confirmed: a nil entry means the ack was
// written to the channel; if the connection drops first, the broker
// redelivers and the inbox answers the duplicates. Deliveries that another
// subscriber made, or that this package did not make, are acked with
// their own Ack. A delivery already requeued by AckWait gets
// [ErrAckWaitExpired]; one already settled, nil. When some acks fail it
// returns a [*broker.BatchAckError] naming them.
func (s *Subscriber) AckBatch(ctx context.Context, ds []broker.Delivery) error {
	errs := make([]error, len(ds))
	var (
		groups []*settler
		idx    = map[*settler][]int{}
		first  = map[*delivery]int{} // a delivery listed twice shares its first entry's error
		dups   [][2]int
	)
	for i, d := range ds {
		ad, ok := d.(*delivery)
		if !ok || ad.s != s {
			errs[i] = d.Ack(ctx)
			continue
		}
		if j, seen := first[ad]; seen {
			dups = append(dups, [2]int{i, j})
			continue
		}
		first[ad] = i
		claimed, err := ad.claim()
		if !claimed {
			errs[i] = err
			continue
		}
		if _, seen := idx[ad.st]; !seen {
			groups = append(groups, ad.st)
		}
		idx[ad.st] = append(idx[ad.st], i)
	}
	for _, st := range groups {
		is := idx[st]
		tags := make([]uint64, len(is))
		for j, i := range is {
			tags[j] = ds[i].(*delivery).tag
		}
		for j, err := range st.ackAll(tags) {
			if err != nil {
				errs[is[j]] = fmt.Errorf("amqp: settle %q: %w", ds[is[j]].Message().ID, errors.Join(err, broker.ErrUnavailable))
			}
		}
	}
	for _, d := range dups {
		errs[d[0]] = errs[d[1]]
	}
	return broker.NewBatchAckError(errs)
}

var _ broker.BatchAcker = (*Subscriber)(nil)
