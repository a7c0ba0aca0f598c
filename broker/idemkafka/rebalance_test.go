package idemkafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemkafka"
)

// A rebalance that revokes a partition while a poll holds new records of
// it must not let those records start a fresh state of the partition:
// acking them would commit past earlier records still in processing, and
// the partition's next owner would never consume those. The revoke waits
// for the poll to register its records; their acks then fail with
// ErrRevoked, and the group's committed offset stays at the first record
// not settled.
func TestRevokeDuringPollCommitsNoUnsettledRecord(t *testing.T) {
	addrs := newCluster(t)
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := "revokepoll-" + unique()
	if err := idemkafka.EnsureTopic(t.Context(), pub.Client(), topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	var msgs []idem.Message
	for i := range 20 {
		msgs = append(msgs, idem.Message{ID: fmt.Sprintf("m%d", i), Subject: topic, Key: "k"})
	}
	if _, err := pub.PublishResults(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	group := "g-" + topic
	// An eager balancer: a member joining revokes every partition.
	opts := []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.Balancers(kgo.RangeBalancer())}
	newSub := func(opts ...kgo.Opt) *idemkafka.Subscriber {
		s, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: group,
			Topics: []string{topic}, AckWait: time.Minute, Opts: opts})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// s1 reports the generation of each assignment it gets, and each
	// rebalance that waits for its poll.
	assigned := make(chan int32, 16)
	blocked := make(chan struct{}, 16)
	s1 := newSub(append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, _ map[string][]int32) {
			_, gen := cl.GroupMetadata()
			assigned <- gen
		}),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { blocked <- struct{}{} }),
	)...)
	defer s1.Close()
	guard := time.After(time.Minute) // against a hang, not a timing assertion
	gen0 := int32(-1)
	select {
	case gen0 = <-assigned:
	case <-guard:
		t.Fatal("s1 was never assigned the partition")
	}
	// rebalanced waits for an assignment of a generation after gen0 (s1
	// then revoked the partition and joined the group again), or, if
	// orBlocked, for a rebalance waiting for s1's poll. It reports whether
	// the rebalance completed.
	rebalanced := func(orBlocked bool) bool {
		t.Helper()
		var block <-chan struct{}
		if orBlocked {
			block = blocked
		}
		for {
			select {
			case gen := <-assigned:
				if gen > gen0 {
					return true
				}
			case <-block:
				return false
			case <-guard:
				t.Error("the rebalance neither completed nor waited for the poll")
				return false
			}
		}
	}

	// The first records are in processing (fetched, not acked).
	first, err := s1.Fetch(t.Context(), 5, 10*time.Second)
	if err != nil || len(first) == 0 {
		t.Fatalf("first fetch: %d deliveries, %v", len(first), err)
	}
	low := offsetOf(t, first[0])

	// The next poll returns records; before they are registered a second
	// member joins, and the rebalance revokes the partition from s1. Wait
	// until the revoke ran (s1 joined again), or until it waits for this
	// poll.
	var s2 *idemkafka.Subscriber
	done := false
	idemkafka.SetAfterPoll(s1, func(records int) {
		if records == 0 || s2 != nil {
			return
		}
		s2 = newSub(opts...)
		done = rebalanced(true)
	})
	var second []broker.Delivery
	for len(second) == 0 {
		if second, err = s1.Fetch(t.Context(), 10, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if s2 == nil {
		t.Fatal("the second member never joined")
	}
	defer s2.Close()
	if !done && !rebalanced(false) {
		t.FailNow()
	}

	// The partition was revoked after the records were delivered: their
	// acks fail, and nothing past the first unsettled record is committed.
	for _, d := range second {
		if err := d.Ack(t.Context()); !errors.Is(err, idemkafka.ErrRevoked) {
			t.Errorf("ack of %s, polled before the revoke: %v, want ErrRevoked", d.Message().ID, err)
		}
	}
	if off := committedOffset(t, pub.Client(), group, topic, 0); off > low {
		t.Fatalf("the group committed offset %d while offset %d (delivered before the revoke) was never settled: "+
			"the partition's next owner starts past it", off, low)
	}
}

// offsetOf is the offset of d's record.
func offsetOf(t *testing.T, d broker.Delivery) int64 {
	t.Helper()
	var part int32
	var off int64
	if _, err := fmt.Sscanf(d.Message().Position, "%d/%d", &part, &off); err != nil {
		t.Fatalf("position %q: %v", d.Message().Position, err)
	}
	return off
}

// committedOffset is group's committed offset of topic's partition, -1 if
// none.
func committedOffset(t *testing.T, cl *kgo.Client, group, topic string, part int32) int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{part}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(t.Context(), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if rt.Topic == topic && p.Partition == part {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					t.Fatalf("offset fetch %s/%d: %v", topic, part, err)
				}
				return p.Offset
			}
		}
	}
	t.Fatalf("offset fetch: no %s/%d in the reply", topic, part)
	return 0
}
