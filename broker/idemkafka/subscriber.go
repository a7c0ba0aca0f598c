package idemkafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/origin"
)

// ErrRevoked reports an Ack, Nak or Term of a record whose partition was
// revoked from this group member (rebalance) after it was delivered. The
// new owner consumes the record again from the committed offset.
var ErrRevoked = errors.New("kafka: partition revoked")

// SubscriberConfig configures a [Subscriber].
type SubscriberConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Group is the consumer group (the subscription). Required.
	Group string
	// Topics are the topics to consume. Required.
	Topics []string
	// AckWait is how long a delivery may stay unacknowledged before it is
	// delivered again by this subscriber (in-process; Kafka itself never
	// redelivers within a session). Defaults to 30s.
	AckWait time.Duration
	// Opts are extra franz-go options, applied last.
	Opts []kgo.Opt
	// Logger receives debug logs. Defaults to discard.
	Logger *slog.Logger
}

// Subscriber consumes a Kafka consumer group with auto-commit disabled. It
// implements [broker.Subscriber] and is safe for concurrent use.
//
// Records of a partition stay in memory from their fetch until the
// committed offset passes them. Attempt counts deliveries by this
// subscriber only: after a restart or rebalance it starts again at 1. A
// rebalance waits for a Fetch to register the records it polled, not for
// their processing; acks of records of a partition revoked since fail
// with [ErrRevoked].
type Subscriber struct {
	cl      *kgo.Client
	ackWait time.Duration
	log     *slog.Logger

	pollMu   sync.Mutex // serialises PollRecords
	commitMu sync.Mutex // serialises commits

	mu        sync.Mutex // protects the fields below
	parts     map[tp]*partState
	closed    bool
	token     uint64
	retryAt   time.Time     // the earliest retry of a failed commit (retryCommits)
	retryWait time.Duration // the wait after the last failed retry, doubling

	// afterPoll, set by tests only, runs between PollRecords and the
	// registration of the records it returned.
	afterPoll func(records int)
}

type tp struct {
	topic string
	part  int32
}

type partState struct {
	recs      []*rec // fetched, not yet committed, in offset order
	committed int64  // last committed offset (next to consume), -1 if none by us
	// uncommitted is set when a commit of settled records failed while
	// this member kept the partition (the broker refused it or did not
	// answer): retryCommits commits them again, so an idle partition's
	// offset does not stay behind its settled records until a rebalance.
	uncommitted bool
}

// A failed commit is tried again (retryCommits) commitRetryInterval after
// it failed, then after twice as long at every retry that fails too, up to
// maxCommitRetryInterval.
const (
	commitRetryInterval    = 500 * time.Millisecond
	maxCommitRetryInterval = 30 * time.Second
)

type rec struct {
	r        *kgo.Record
	ps       *partState
	attempts int
	settled  bool
	inflight bool
	deadline time.Time
	readyAt  time.Time
	token    uint64
}

// NewSubscriber joins the consumer group. A group without committed
// offsets starts at the beginning of each partition.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	switch {
	case len(cfg.Brokers) == 0 || cfg.Group == "" || len(cfg.Topics) == 0:
		return nil, checks.Optionf("kafka: Brokers, Group and Topics are required")
	case cfg.AckWait < 0:
		return nil, checks.Optionf("kafka: negative AckWait")
	}
	s := &Subscriber{
		ackWait: cmp.Or(cfg.AckWait, 30*time.Second),
		log:     obs.Component(cfg.Logger, "broker/kafka", "group", cfg.Group),
		parts:   map[tp]*partState{},
	}
	// drop forgets the revoked or lost partitions: their deliveries' acks
	// fail with ErrRevoked, and the group delivers their records again
	// from the committed offset. BlockRebalanceOnPoll keeps it from
	// running between a PollRecords and the registration of its records
	// (see poll).
	drop := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for t, ps := range m {
			for _, p := range ps {
				delete(s.parts, tp{t, p})
			}
		}
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(drop),
		kgo.OnPartitionsLost(drop),
	}, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", errors.Join(err, idem.ErrInvalidOption))
	}
	s.cl = cl
	return s, nil
}

// Fetch returns up to max deliveries (max < 1 means 1): first records due
// again (Nak delay passed, ack wait expired), then new records from the
// group's partitions. It waits until one is available, maxWait passes
// (none, nil error) or ctx is done (ctx's error).
func (s *Subscriber) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	max = cmp.Or(max, 1)
	if max < 1 {
		max = 1
	}
	deadline := time.Now().Add(maxWait)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, broker.ErrClosed
		}
		out, wake := s.dueLocked(max, deadline)
		s.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.retryCommits(ctx, deadline)
		now := time.Now()
		if !now.Before(deadline) {
			return nil, nil
		}
		// Poll in short slices so Naks and ack waits of other goroutines
		// are honoured promptly.
		wait := min(wake.Sub(now), 100*time.Millisecond)
		out, err := s.poll(ctx, max, max2(wait, time.Millisecond))
		if err != nil || len(out) > 0 {
			return out, err
		}
	}
}

func max2(a, b time.Duration) time.Duration {
	if a < b {
		return b
	}
	return a
}

// dueLocked delivers records that are due again and returns the earliest
// time another one will be.
func (s *Subscriber) dueLocked(max int, wake time.Time) ([]broker.Delivery, time.Time) {
	now := time.Now()
	var out []broker.Delivery
	for _, ps := range s.parts {
		for _, r := range ps.recs {
			if r.settled {
				continue
			}
			if r.inflight && !now.Before(r.deadline) {
				r.inflight, r.readyAt = false, r.deadline
			}
			switch {
			case r.inflight:
				wake = minTime(wake, r.deadline)
			case now.Before(r.readyAt):
				wake = minTime(wake, r.readyAt)
			case len(out) < max:
				out = append(out, s.deliverLocked(r, now))
			}
		}
	}
	return out, wake
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *Subscriber) deliverLocked(r *rec, now time.Time) *delivery {
	s.token++
	r.attempts++
	r.inflight, r.deadline, r.token = true, now.Add(s.ackWait), s.token
	return &delivery{s: s, r: r, token: r.token, msg: fromRecord(r.r, r.attempts)}
}

func (s *Subscriber) poll(ctx context.Context, max int, wait time.Duration) ([]broker.Delivery, error) {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs := s.cl.PollRecords(pctx, max)
	// BlockRebalanceOnPoll: no revoke or loss (drop) runs until
	// AllowRebalance, so the records are registered in the state of a
	// partition this member still owns. Without it a drop could run first,
	// and the records would start a fresh state without the partition's
	// earlier records still in processing: acking them would commit past
	// those, which the partition's new owner then never consumes. Only the
	// registration blocks a rebalance, not the processing (after Fetch
	// returns): a later drop fails the acks with ErrRevoked. The deferred
	// AllowRebalance runs after s.mu is released and before pollMu is, so
	// it never ends the block of another poll.
	defer s.cl.AllowRebalance()
	if s.afterPoll != nil {
		s.afterPoll(len(fs.Records()))
	}
	if fs.IsClientClosed() {
		return nil, broker.ErrClosed
	}
	var perr error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.log.WarnContext(ctx, "fetch error", "topic", t, "partition", p, "error", err)
			perr = err
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []broker.Delivery
	for _, kr := range fs.Records() {
		k := tp{kr.Topic, kr.Partition}
		ps := s.parts[k]
		if ps == nil {
			ps = &partState{committed: -1}
			s.parts[k] = ps
		}
		r := &rec{r: kr, ps: ps}
		ps.recs = append(ps.recs, r)
		out = append(out, s.deliverLocked(r, now))
	}
	if len(out) == 0 && perr != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("kafka: fetch: %w", classify(perr))
	}
	return out, nil
}

// retryCommits commits again the partitions whose last commit failed
// while this member kept them (see partState.uncommitted), once the wait
// after that failure (retryAt) has passed. Their records are settled here
// and no longer delivered, so without it their offset would move only with
// the next ack of the partition, or be consumed again after a rebalance or
// restart. A retry never makes a Fetch outlast its wait: it is skipped
// while another commit runs (which may be waiting for a rebalance to end:
// franz-go holds a commit back meanwhile, the usual reason the first one
// failed), and gives up at deadline, the Fetch's own. One Fetch at a time
// runs a retry (it moves retryAt on before committing). A failure is
// logged and tried again after a wait that doubles.
func (s *Subscriber) retryCommits(ctx context.Context, deadline time.Time) {
	s.mu.Lock()
	now := time.Now()
	var parts map[tp]*partState
	if !now.Before(s.retryAt) && now.Before(deadline) {
		for k, ps := range s.parts {
			if ps.uncommitted {
				if parts == nil {
					parts = map[tp]*partState{}
				}
				parts[k] = ps
			}
		}
		if parts == nil {
			s.retryWait = 0 // nothing left to retry: the next failure starts over
		} else {
			s.retryAt = now.Add(max(s.retryWait, commitRetryInterval)) // this Fetch's round
		}
	}
	s.mu.Unlock()
	if parts == nil || !s.commitMu.TryLock() {
		return
	}
	errs := func() map[tp]error {
		defer s.commitMu.Unlock()
		cctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		return s.commitLocked(cctx, parts)
	}()
	failed := false
	for k, err := range errs {
		if !errors.Is(err, ErrRevoked) {
			failed = true
			s.log.WarnContext(ctx, "commit retry failed; tried again later", "topic", k.topic, "partition", k.part, "error", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if failed {
		s.retryWait = min(max(2*s.retryWait, 2*commitRetryInterval), maxCommitRetryInterval)
		s.retryAt = time.Now().Add(s.retryWait)
	} else {
		s.retryWait = 0
	}
}

// settle marks r settled and commits the offset after the longest settled
// prefix of its partition, if it advanced.
func (s *Subscriber) settle(ctx context.Context, d *delivery) error {
	s.mu.Lock()
	r := d.r
	k := tp{r.r.Topic, r.r.Partition}
	if s.parts[k] != r.ps {
		s.mu.Unlock()
		return fmt.Errorf("kafka: settle %s: %w", position(r.r), ErrRevoked)
	}
	r.settled = true
	if ps := r.ps; len(ps.recs) > 0 && !ps.recs[0].settled {
		// An earlier record is still unsettled: nothing to commit yet;
		// the commit that settles it covers this one.
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.commit(ctx, map[tp]*partState{k: r.ps})[k]
}

// commit commits, in one request, each partition of parts past the
// longest settled prefix of its records, where that advances the group's
// offset, and returns the error of each partition that failed (a
// partition revoked from this member, or the broker's refusal).
func (s *Subscriber) commit(ctx context.Context, parts map[tp]*partState) map[tp]error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitLocked(ctx, parts)
}

// commitLocked is commit with s.commitMu held.
func (s *Subscriber) commitLocked(ctx context.Context, parts map[tp]*partState) map[tp]error {
	errs := map[tp]error{}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	upto := map[tp]int64{}
	s.mu.Lock()
	for k, ps := range parts {
		// A state dropped by a revoke or loss is never committed. (A state
		// is only created for records polled while the partition was
		// owned: see poll.)
		if s.parts[k] != ps {
			errs[k] = fmt.Errorf("kafka: commit %s partition %d: %w", k.topic, k.part, ErrRevoked)
			continue
		}
		n := 0
		for n < len(ps.recs) && ps.recs[n].settled {
			n++
		}
		if n == 0 { // nothing settled at the front: nothing to commit
			ps.uncommitted = false // the ack that settles the front commits
			continue
		}
		last := ps.recs[n-1].r
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[k.topic][k.part] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		upto[k] = last.Offset + 1
	}
	s.mu.Unlock()
	if len(upto) == 0 {
		return errs
	}
	var cerr error
	confirmed := map[tp]bool{}
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		// From OffsetCommit v10 on a reply names topics by ID only.
		names := map[[16]byte]string{}
		for _, t := range req.Topics {
			names[t.TopicID] = t.Topic
		}
		for _, t := range resp.Topics {
			name := t.Topic
			if name == "" {
				name = names[t.TopicID]
			}
			for _, p := range t.Partitions {
				k := tp{name, p.Partition}
				if _, ok := upto[k]; !ok {
					continue
				}
				if err := kerrFor(p.ErrorCode); err != nil {
					errs[k] = fmt.Errorf("kafka: commit %s %d/%d: %w", k.topic, k.part, upto[k], classify(err))
					delete(upto, k)
					continue
				}
				confirmed[k] = true
			}
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, off := range upto {
		switch {
		case cerr != nil:
			errs[k] = fmt.Errorf("kafka: commit %s %d/%d: %w", k.topic, k.part, off, classify(cerr))
			continue
		case !confirmed[k]:
			errs[k] = fmt.Errorf("kafka: commit %s %d/%d: the broker's reply does not confirm it: %w", k.topic, k.part, off, broker.ErrUnavailable)
			continue
		}
		ps := parts[k]
		ps.uncommitted = false
		ps.committed = max(ps.committed, off)
		i := 0
		for i < len(ps.recs) && ps.recs[i].r.Offset < ps.committed {
			i++
		}
		ps.recs = ps.recs[i:]
	}
	for k := range parts {
		// The records of a failed commit stay settled; the next commit of
		// the partition covers them, or retryCommits does, commitRetryInterval
		// from now unless a retry is already due later (a retry pending
		// is not put off by further failures).
		if errs[k] != nil && !errors.Is(errs[k], ErrRevoked) {
			parts[k].uncommitted = true
			if now := time.Now(); !now.Before(s.retryAt) {
				s.retryAt = now.Add(commitRetryInterval)
			}
		}
	}
	return errs
}

// AckBatch settles ds and commits all their partitions in one request,
// each past every settled record before its first unsettled one: one
// commit for the batch instead of one per record. Deliveries this
// subscriber did not make are acked one by one with Ack. When some acks
// fail (a partition revoked, a commit refused) it returns a
// [*broker.BatchAckError] naming them: only the failed partitions'
// deliveries. Their records stay settled here. Of a partition this member
// keeps, a later commit covers them: the next ack of the partition, or a
// later Fetch, which tries a failed commit again (500 ms after the
// failure, then after a wait that doubles up to 30 s).
// Of a revoked partition, the group delivers them again and the inbox
// answers each as a duplicate.
func (s *Subscriber) AckBatch(ctx context.Context, ds []broker.Delivery) error {
	errs := make([]error, len(ds))
	var others []int
	parts := map[tp]*partState{}
	members := map[tp][]int{}
	s.mu.Lock()
	for i, d := range ds {
		kd, ok := d.(*delivery)
		if !ok || kd.s != s {
			others = append(others, i)
			continue
		}
		k := tp{kd.r.r.Topic, kd.r.r.Partition}
		if s.parts[k] != kd.r.ps {
			errs[i] = fmt.Errorf("kafka: settle %s: %w", position(kd.r.r), ErrRevoked)
			continue
		}
		kd.r.settled = true
		parts[k] = kd.r.ps
		members[k] = append(members[k], i)
	}
	s.mu.Unlock()
	for _, i := range others {
		errs[i] = ds[i].Ack(ctx)
	}
	if len(parts) > 0 {
		for k, err := range s.commit(ctx, parts) {
			for _, i := range members[k] {
				errs[i] = err
			}
		}
	}
	return broker.NewBatchAckError(errs)
}

var _ broker.BatchAcker = (*Subscriber)(nil)

// Close leaves the group without committing; records after the committed
// offsets are delivered again to the group.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cl.Close()
	return nil
}

type delivery struct {
	s     *Subscriber
	r     *rec
	token uint64
	msg   idem.Message
}

func (d *delivery) Message() idem.Message { return d.msg }

// Origin implements [broker.Locator]: the record's topic, partition and
// offset.
func (d *delivery) Origin() map[string]string {
	return map[string]string{
		origin.Topic:     d.r.r.Topic,
		origin.Partition: strconv.FormatInt(int64(d.r.r.Partition), 10),
		origin.Offset:    strconv.FormatInt(d.r.r.Offset, 10),
	}
}

// Ack settles the record and synchronously commits the partition's offset
// past every settled record before the first unsettled one. A nil error
// means the record is settled here; it is committed once every earlier
// record of its partition is settled too. When the commit fails and the
// partition is still this member's, the record stays settled and a later
// Fetch tries the commit again (see AckBatch).
func (d *delivery) Ack(ctx context.Context) error { return d.s.settle(ctx, d) }

// Term settles the record like Ack (Kafka has no dead-letter of its own;
// the caller has stored it elsewhere).
func (d *delivery) Term(ctx context.Context) error { return d.s.settle(ctx, d) }

// Nak redelivers the record from this subscriber after delay. The
// partition's committed offset does not move past it meanwhile. It is
// ignored if the record was redelivered or settled since this delivery.
func (d *delivery) Nak(ctx context.Context, delay time.Duration) error {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r := d.r
	if s.parts[tp{r.r.Topic, r.r.Partition}] != r.ps {
		return fmt.Errorf("kafka: nak %s: %w", position(r.r), ErrRevoked)
	}
	if r.settled || r.token != d.token || !r.inflight {
		return nil
	}
	r.inflight, r.readyAt = false, time.Now().Add(max(delay, 0))
	return nil
}
