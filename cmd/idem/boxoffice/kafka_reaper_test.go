package boxoffice_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
)

// TestKafkaReaperExpiresAMemberWhoseJoinReplyWasLost: a member that sent
// its JoinGroup and died before the reply (a SIGKILL during a rebalance)
// is given partitions by the leader. On kfake alone it then keeps them for
// good about half the time (whether kfake starts its session timer
// depends on which of two ready select cases wins) and nobody consumes
// them. On the cluster of StartKafka the reaper expires it after its
// session timeout, as a real broker does, and the live member consumes
// every partition. Four rounds, each on its own group, so that without
// the reaper the test fails with a probability of about 15/16.
func TestKafkaReaperExpiresAMemberWhoseJoinReplyWasLost(t *testing.T) {
	t.Parallel()
	kc, err := boxoffice.StartKafka()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	for round := range 4 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			t.Parallel()
			deadMemberRound(t, kc, fmt.Sprint("reaper-", round))
		})
	}
}

func deadMemberRound(t *testing.T, kc *boxoffice.KafkaCluster, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	seeds := kc.ListenAddrs()
	group := topic + "-group"

	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ct := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 3, 1
	ct.Topics = append(ct.Topics, rt)
	if resp, err := ct.RequestWith(ctx, admin); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}

	// The live member: eager range assignment, so adding a member moves
	// partitions in one rebalance (no second, cooperative one that would
	// drop the dead member on its own).
	live, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(time.Second),
		kgo.RebalanceTimeout(3*time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	var mu sync.Mutex
	got := map[int32]bool{}
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			live.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) {
				mu.Lock()
				got[r.Partition] = true
				mu.Unlock()
			})
		}
	}()
	defer func() { stopPoll(); <-polled }()

	members := func() (string, []string) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(dctx, admin)
		if err != nil || len(resp.Groups) != 1 {
			return "", nil
		}
		var ids []string
		for _, m := range resp.Groups[0].Members {
			ids = append(ids, m.MemberID)
		}
		return resp.Groups[0].State, ids
	}
	waitFor := func(what string, ok func(state string, ids []string) bool) {
		t.Helper()
		for {
			if state, ids := members(); ok(state, ids) {
				return
			}
			select {
			case <-ctx.Done():
				state, ids := members()
				t.Fatalf("%s: not reached (group %s, members %v, evicted %d)", what, state, ids, kc.Evicted())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitFor("the live member alone, stable", func(s string, ids []string) bool { return s == "Stable" && len(ids) == 1 })

	ghost := joinAndDie(t, seeds[0], group, topic)
	waitFor("the dead member in a stable group of two (range gives each member a partition)", func(s string, ids []string) bool {
		return s == "Stable" && slices.Contains(ids, ghost) && len(ids) == 2
	})
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for part := range int32(3) {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A failed describe reports no state: it must not pass for "gone".
	waitFor("the dead member expired", func(s string, ids []string) bool { return s != "" && !slices.Contains(ids, ghost) })
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the live member consumed partitions %v of 3 after the dead one expired", got)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// joinAndDie joins group as a new member on a raw connection (JoinGroup
// v5: the first join returns MEMBER_ID_REQUIRED and the id, the second
// parks in the rebalance) and closes the connection before the reply,
// like a process SIGKILLed while it waits to join. It returns the id.
func joinAndDie(t *testing.T, addr, group, topic string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(5)
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = group, 3000, 3000, "consumer"
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", meta.AppendTo(nil)
	join.Protocols = append(join.Protocols, proto)
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("dead-member"))
	if _, err := conn.Write(f.AppendRequest(nil, join, 1)); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.SetVersion(5)
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		t.Fatalf("first join: error %d, member %q; want MEMBER_ID_REQUIRED with an id", resp.ErrorCode, resp.MemberID)
	}
	join.MemberID = resp.MemberID
	if _, err := conn.Write(f.AppendRequest(nil, join, 2)); err != nil {
		t.Fatal(err)
	}
	return resp.MemberID
}
