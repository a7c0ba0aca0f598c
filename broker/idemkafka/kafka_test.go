package idemkafka_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/brokertest"
	"github.com/idemkit/idem/broker/idemkafka"
)

const ackWait = 500 * time.Millisecond

func newCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func unique() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func TestConformanceKfake(t *testing.T) {
	addrs := newCluster(t)
	brokertest.Run(t, func(t *testing.T) brokertest.Harness {
		pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
		if err != nil {
			t.Fatal(err)
		}
		topic := "idemtest-" + unique()
		if err := idemkafka.EnsureTopic(t.Context(), pub.Client(), topic, 3, 1); err != nil {
			t.Fatal(err)
		}
		return brokertest.Harness{
			Publisher: pub,
			Subject:   topic,
			AckWait:   ackWait,
			Subscribe: func(t *testing.T, name string) broker.Subscriber {
				s, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{
					Brokers: addrs, Group: topic + "-" + name, Topics: []string{topic}, AckWait: ackWait,
					Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)},
				})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}

// Acks out of order commit only the settled prefix: a new member of the
// group resumes at the first record not yet acked. The same holds for
// acks given together with AckBatch (one commit per partition).
func TestCommitOnlySettledPrefix(t *testing.T) {
	t.Run("Ack", func(t *testing.T) { testCommitOnlySettledPrefix(t, false) })
	t.Run("AckBatch", func(t *testing.T) { testCommitOnlySettledPrefix(t, true) })
}

func testCommitOnlySettledPrefix(t *testing.T, batch bool) {
	addrs := newCluster(t)
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := "prefix-" + unique()
	if err := idemkafka.EnsureTopic(t.Context(), pub.Client(), topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	var msgs []idem.Message
	for _, id := range []string{"m0", "m1", "m2", "m3"} {
		msgs = append(msgs, idem.Message{ID: id, Subject: topic, Key: "k"})
	}
	res, err := pub.PublishResults(t.Context(), msgs...)
	if err != nil || len(res) != 4 || res[0].Position != "0/0" {
		t.Fatalf("publish: %v %+v", err, res)
	}
	newSub := func() *idemkafka.Subscriber {
		s, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: "g-" + topic, Topics: []string{topic}, AckWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1 := newSub()
	var ds []broker.Delivery
	for deadline := time.Now().Add(10 * time.Second); len(ds) < 4 && time.Now().Before(deadline); {
		got, err := s1.Fetch(t.Context(), 4-len(ds), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	if len(ds) != 4 {
		t.Fatalf("got %d deliveries", len(ds))
	}
	// Ack m0, m2, m3 but not m1: only offset 1 may be committed.
	if batch {
		if err := s1.AckBatch(t.Context(), []broker.Delivery{ds[0], ds[2], ds[3]}); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, i := range []int{0, 2, 3} {
			if err := ds[i].Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = s1.Close()
	s2 := newSub()
	defer s2.Close()
	var ids []string
	for deadline := time.Now().Add(10 * time.Second); len(ids) < 3 && time.Now().Before(deadline); {
		got, err := s2.Fetch(t.Context(), 10, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range got {
			ids = append(ids, d.Message().ID)
			_ = d.Ack(t.Context())
		}
	}
	if len(ids) != 3 || ids[0] != "m1" || ids[1] != "m2" || ids[2] != "m3" {
		t.Fatalf("after restart got %v, want [m1 m2 m3]", ids)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatal(err)
	}
	if _, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: []string{"x:1"}}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatal(err)
	}
	// The doc says disabling idempotent writes is refused; it must be.
	p, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: []string{"127.0.0.1:1"}, Opts: []kgo.Opt{kgo.DisableIdempotentWrite()}})
	if !errors.Is(err, idem.ErrInvalidOption) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("DisableIdempotentWrite: err = %v, want ErrInvalidOption", err)
	}
}

// TestNoTopicIsNotAnOutage: producing to a topic that does not exist is a
// configuration mistake that names the topic (a permanent
// broker.ErrNoRoute: a relay parks the event with it), not an outage.
func TestNoTopicIsNotAnOutage(t *testing.T) {
	addrs := newCluster(t)
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := "missing-" + unique()
	_, err = pub.PublishResults(t.Context(), idem.Message{ID: "m0", Subject: topic, Payload: []byte("x")})
	if !errors.Is(err, broker.ErrNoRoute) || !idem.IsPermanent(err) || errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("produce to a missing topic: %v; want a permanent broker.ErrNoRoute, not ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), `no topic "`+topic+`"`) {
		t.Fatalf("the error does not name the topic: %v", err)
	}
}

// spread is a topic of three partitions holding 30 records with distinct
// keys, and a maker of subscribers of one group on it.
type spread struct {
	t     *testing.T
	addrs []string
	topic string
	n     int
}

func newSpread(t *testing.T, addrs []string, prefix string) *spread {
	t.Helper()
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sp := &spread{t: t, addrs: addrs, topic: prefix + "-" + unique(), n: 30}
	if err := idemkafka.EnsureTopic(t.Context(), pub.Client(), sp.topic, 3, 1); err != nil {
		t.Fatal(err)
	}
	var msgs []idem.Message
	for i := range sp.n {
		msgs = append(msgs, idem.Message{ID: fmt.Sprintf("m%d", i), Subject: sp.topic, Key: fmt.Sprintf("k%d", i)})
	}
	if _, err := pub.PublishResults(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	return sp
}

// subscriber joins the topic's group, with opts.
func (sp *spread) subscriber(opts ...kgo.Opt) *idemkafka.Subscriber {
	sp.t.Helper()
	s, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: sp.addrs, Group: "g-" + sp.topic,
		Topics: []string{sp.topic}, AckWait: time.Minute, Opts: opts})
	if err != nil {
		sp.t.Fatal(err)
	}
	return s
}

// drain fetches until no record came for idle (or 20 s passed).
func (sp *spread) drain(s *idemkafka.Subscriber, idle time.Duration) []broker.Delivery {
	sp.t.Helper()
	var ds []broker.Delivery
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		got, err := s.Fetch(sp.t.Context(), 100, idle)
		if err != nil {
			sp.t.Fatal(err)
		}
		if len(got) == 0 && len(ds) > 0 {
			break
		}
		ds = append(ds, got...)
	}
	return ds
}

// partitionOf is the partition of d's record.
func partitionOf(d broker.Delivery) string { return strings.Split(d.Message().Position, "/")[0] }

// A batch whose partitions were partly revoked by a rebalance acks the
// rest: AckBatch's BatchAckError fails only the revoked partition's
// deliveries (ErrRevoked), the others are committed, and a later member
// resumes past them but not past the revoked ones.
func TestAckBatchPartlyRevoked(t *testing.T) {
	sp := newSpread(t, newCluster(t), "revoked")
	opts := []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
	s1 := sp.subscriber(opts...)
	ds := sp.drain(s1, time.Second)
	if len(ds) != sp.n {
		t.Fatalf("the first member fetched %d records, want %d", len(ds), sp.n)
	}
	// A second member joins: the rebalance revokes some of s1's
	// partitions, whose records it then consumes from the start (nothing
	// is committed yet).
	s2 := sp.subscriber(opts...)
	moved := map[string]bool{}
	for _, d := range sp.drain(s2, 2*time.Second) {
		moved[partitionOf(d)] = true
	}
	if len(moved) == 0 || len(moved) == 3 {
		t.Fatalf("the second member took partitions %v of 3; want some, not all", moved)
	}
	err := s1.AckBatch(t.Context(), ds)
	var be *broker.BatchAckError
	if !errors.As(err, &be) || !errors.Is(err, idemkafka.ErrRevoked) || len(be.Errs) != len(ds) {
		t.Fatalf("AckBatch after the rebalance: %v; want a BatchAckError of %d entries wrapping ErrRevoked", err, len(ds))
	}
	kept := 0
	for i, d := range ds {
		if got, want := broker.BatchAcked(err, i), !moved[partitionOf(d)]; got != want {
			t.Errorf("%s (partition %s): acked %v, want %v (%v)", d.Message().ID, partitionOf(d), got, want, be.Errs[i])
		}
		if !moved[partitionOf(d)] {
			kept++
		}
	}
	// Both leave without acking more; a new member resumes at the start
	// of the revoked partitions and past everything s1's batch acked.
	_ = s2.Close()
	_ = s1.Close()
	s3 := sp.subscriber(opts...)
	defer s3.Close()
	again := sp.drain(s3, 2*time.Second)
	for _, d := range again {
		if !moved[partitionOf(d)] {
			t.Errorf("%s of partition %s delivered again after its batch ack", d.Message().ID, partitionOf(d))
		}
	}
	if len(again) != len(ds)-kept {
		t.Errorf("a new member got %d records, want the %d of the revoked partitions", len(again), len(ds)-kept)
	}
}

// commitCounter counts the OffsetCommit requests a client writes.
type commitCounter struct{ n atomic.Int64 }

func (c *commitCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.OffsetCommit) && err == nil {
		c.n.Add(1)
	}
}

// A batch spanning every partition is committed with one request, and a
// new member of the group finds nothing left to consume.
func TestAckBatchOneCommitRequest(t *testing.T) {
	sp := newSpread(t, newCluster(t), "onecommit")
	commits := &commitCounter{}
	s1 := sp.subscriber(kgo.WithHooks(commits))
	ds := sp.drain(s1, time.Second)
	parts := map[string]bool{}
	for _, d := range ds {
		parts[partitionOf(d)] = true
	}
	if len(ds) != sp.n || len(parts) != 3 {
		t.Fatalf("fetched %d records from partitions %v, want %d from 3", len(ds), parts, sp.n)
	}
	before := commits.n.Load()
	if err := s1.AckBatch(t.Context(), ds); err != nil {
		t.Fatal(err)
	}
	if n := commits.n.Load() - before; n != 1 {
		t.Errorf("AckBatch of 3 partitions sent %d OffsetCommit requests, want 1", n)
	}
	_ = s1.Close()
	s2 := sp.subscriber()
	defer s2.Close()
	got, err := s2.Fetch(t.Context(), 10, 3*time.Second)
	if err != nil || len(got) != 0 {
		t.Fatalf("a new member got %d records (%v) after the batch was acked, want none", len(got), err)
	}
}

// drainedCluster starts a cluster whose requests a test can answer
// (kfake.Cluster.ControlKey), spreads records over its topic's three
// partitions (newSpread) and returns a member that fetched them all.
func drainedCluster(t *testing.T, prefix string) (*kfake.Cluster, *spread, *idemkafka.Subscriber, []broker.Delivery) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sp := newSpread(t, c.ListenAddrs(), prefix)
	s := sp.subscriber()
	ds := sp.drain(s, time.Second)
	if len(ds) != sp.n {
		t.Fatalf("fetched %d records, want %d", len(ds), sp.n)
	}
	return c, sp, s, ds
}

// A commit the broker refuses for one partition fails only that
// partition's deliveries, also when the reply names topics by ID only
// (OffsetCommit v10 and later): AckBatch's BatchAckError says so. (The
// reply is the test's, so what the cluster stored is not checked here;
// TestAckBatchPartlyRevoked and TestCommitOnlySettledPrefix check that.)
func TestAckBatchCommitRefused(t *testing.T) {
	c, _, s1, ds := drainedCluster(t, "refused")
	// The next OffsetCommit is answered by the test: partition 1 refused
	// (a non-retriable error), the others committed, topics by ID from v10.
	var version atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		version.Store(int64(req.Version))
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			if req.Version >= 10 {
				st.TopicID = rt.TopicID
			} else {
				st.Topic = rt.Topic
			}
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				if rp.Partition == 1 {
					sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
					continue
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	err := s1.AckBatch(t.Context(), ds)
	var be *broker.BatchAckError
	if !errors.As(err, &be) || len(be.Errs) != len(ds) {
		t.Fatalf("AckBatch with partition 1 refused: %v; want a BatchAckError of %d entries", err, len(ds))
	}
	refused := 0
	for i, d := range ds {
		if got, want := broker.BatchAcked(err, i), partitionOf(d) != "1"; got != want {
			t.Errorf("%s (partition %s): acked %v, want %v (%v)", d.Message().ID, partitionOf(d), got, want, be.Errs[i])
		}
		if partitionOf(d) == "1" {
			refused++
		}
	}
	if refused == 0 || refused == len(ds) {
		t.Fatalf("%d of %d records in partition 1; want some, not all", refused, len(ds))
	}
	if version.Load() < 10 {
		t.Logf("OffsetCommit v%d: the reply named its topics", version.Load())
	}
	_ = s1.Close()
}

// A commit that fails while the member keeps the partition is tried again
// by a later Fetch, without another ack of the partition: its settled
// records are never delivered again here, so otherwise an idle partition's
// offset would stay behind them until a rebalance or restart, and the
// group would consume them again. The cluster refuses the first commit
// (REBALANCE_IN_PROGRESS, for every partition); the group's committed
// offsets must then reach past every acked record, and a new member get
// only the records not acked.
func TestFailedCommitRetried(t *testing.T) {
	t.Run("Ack", func(t *testing.T) { testFailedCommitRetried(t, false) })
	t.Run("AckBatch", func(t *testing.T) { testFailedCommitRetried(t, true) })
}

func testFailedCommitRetried(t *testing.T, batch bool) {
	c, sp, s1, ds := drainedCluster(t, "retry")
	var err error
	// The next OffsetCommit (one control, then the cluster answers
	// again) is refused for every partition, and nothing is stored.
	var refused atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		refused.Add(1)
		req := kr.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewOffsetCommitResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, kerr.RebalanceInProgress.Code
				st.Partitions = append(st.Partitions, p)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	// AckBatch acks every record, Ack the first one only: the front of
	// its partition, so the ack commits, and no later ack of the
	// partition commits it instead.
	acked := ds
	if batch {
		err = s1.AckBatch(t.Context(), ds)
		for i := range ds {
			if broker.BatchAcked(err, i) {
				t.Fatalf("%s acked although its commit was refused (%v)", ds[i].Message().ID, err)
			}
		}
	} else {
		acked = ds[:1]
		err = ds[0].Ack(t.Context())
	}
	if !errors.Is(err, kerr.RebalanceInProgress) || refused.Load() != 1 {
		t.Fatalf("ack with the commit refused: %v (%d requests refused); want an error wrapping kerr.RebalanceInProgress", err, refused.Load())
	}
	// What the group must store: past every acked record of its
	// partition, nothing for a partition none of whose records was acked.
	want := map[int32]int64{}
	for _, d := range acked {
		var p int32
		var o int64
		if _, err := fmt.Sscanf(d.Message().Position, "%d/%d", &p, &o); err != nil {
			t.Fatal(err)
		}
		want[p] = max(want[p], o+1)
	}
	if got := committedOffsets(t, s1, "g-"+sp.topic); len(got) != 0 {
		t.Fatalf("committed offsets %v after the refused commit, want none", got)
	}
	// Fetch, with nothing to deliver, until the group stored them (a
	// guard against a hang, not a timing assertion).
	for guard := time.Now().Add(20 * time.Second); ; {
		got := committedOffsets(t, s1, "g-"+sp.topic)
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(guard) {
			t.Fatalf("committed offsets %v 20 s after the refused commit, want %v: the commit was not tried again", got, want)
		}
		if got, err := s1.Fetch(t.Context(), 10, 100*time.Millisecond); err != nil || len(got) != 0 {
			t.Fatalf("Fetch: %d deliveries, %v; want none", len(got), err)
		}
	}
	_ = s1.Close()
	s2 := sp.subscriber()
	defer s2.Close()
	var again []broker.Delivery
	if len(acked) < len(ds) {
		again = sp.drain(s2, 2*time.Second)
	} else if again, err = s2.Fetch(t.Context(), 10, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, d := range again {
		if d.Message().ID == acked[0].Message().ID || len(acked) == len(ds) {
			t.Errorf("%s delivered to a new member after its commit was retried", d.Message().ID)
		}
	}
	if len(again) != len(ds)-len(acked) {
		t.Errorf("a new member got %d records, want the %d not acked", len(again), len(ds)-len(acked))
	}
}

// committedOffsets reads the group's committed offset of each partition
// that has one, with an OffsetFetch request on s's client.
func committedOffsets(t *testing.T, s *idemkafka.Subscriber, group string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(t.Context(), idemkafka.Client(s))
	if err != nil {
		t.Fatal(err)
	}
	topics := resp.Topics
	if len(resp.Groups) > 0 {
		for _, g := range resp.Groups {
			if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
				t.Fatalf("OffsetFetch: %v", err)
			}
		}
		topics = nil
		for _, rt := range resp.Groups[0].Topics {
			st := kmsg.NewOffsetFetchResponseTopic()
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetFetchResponseTopicPartition()
				sp.Partition, sp.Offset, sp.ErrorCode = rp.Partition, rp.Offset, rp.ErrorCode
				st.Partitions = append(st.Partitions, sp)
			}
			topics = append(topics, st)
		}
	} else if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	out := map[int32]int64{}
	for _, rt := range topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("OffsetFetch partition %d: %v", rp.Partition, err)
			}
			if rp.Offset >= 0 {
				out[rp.Partition] = rp.Offset
			}
		}
	}
	return out
}
