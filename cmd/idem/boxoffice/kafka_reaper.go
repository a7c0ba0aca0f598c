package boxoffice

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaCluster is the in-process Kafka cluster of [StartKafka]: a kfake
// cluster plus a reaper that gives every consumer group member the
// session timeout a real broker enforces.
//
// kfake starts a member's session timer only when its JoinGroup reply is
// delivered. A member whose process died while its JoinGroup was parked
// in a rebalance (a SIGKILL during the rebalance another kill started)
// gets no reply, so no timer: the leader still assigns it partitions, and
// once the group is stable nothing ever removes it. Those partitions are
// then consumed by nobody. A real broker expires such a member after its
// session timeout and rebalances. The reaper does the same from outside:
// it watches the members' group requests (heartbeats, joins, syncs,
// commits) and, when a member of a stable group has sent none for its
// session timeout, removes it with a LeaveGroup on its behalf, which
// rebalances its partitions onto the live members.
type KafkaCluster struct {
	*kfake.Cluster

	admin   *kgo.Client
	cancel  context.CancelFunc
	done    chan struct{}
	evicted atomic.Int64

	mu      sync.Mutex
	members map[memberKey]*memberSeen // protected by mu
	stable  map[string]time.Time      // group → since when the reaper saw it stable; protected by mu
}

type memberKey struct{ group, member string }

type memberSeen struct {
	at      time.Time     // the member's last group request
	session time.Duration // from its JoinGroup
}

// reapEvery is how often the reaper looks at the groups.
const reapEvery = 500 * time.Millisecond

func startReaper(c *kfake.Cluster) (*KafkaCluster, error) {
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	kc := &KafkaCluster{Cluster: c, admin: admin, cancel: cancel, done: make(chan struct{}),
		members: map[memberKey]*memberSeen{}, stable: map[string]time.Time{}}
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.OffsetCommit, kmsg.LeaveGroup} {
		c.ControlKey(int16(key), kc.observe)
	}
	go kc.reap(ctx)
	return kc, nil
}

// Close stops the reaper and the cluster.
func (kc *KafkaCluster) Close() {
	kc.cancel()
	<-kc.done
	kc.admin.Close()
	kc.Cluster.Close()
}

// Evicted reports how many members the reaper has removed.
func (kc *KafkaCluster) Evicted() int64 { return kc.evicted.Load() }

// observe records a member's group request; it never handles the request
// (the cluster goes on to process it as usual).
func (kc *KafkaCluster) observe(req kmsg.Request) (kmsg.Response, error, bool) { //nolint:revive // kfake's control signature
	now := time.Now()
	kc.mu.Lock()
	defer kc.mu.Unlock()
	seen := func(group, member string) *memberSeen {
		if member == "" {
			return nil
		}
		k := memberKey{group, member}
		m := kc.members[k]
		if m == nil {
			m = &memberSeen{session: KafkaSessionTimeout}
			kc.members[k] = m
		}
		m.at = now
		return m
	}
	switch r := req.(type) {
	case *kmsg.HeartbeatRequest:
		seen(r.Group, r.MemberID)
	case *kmsg.JoinGroupRequest:
		if m := seen(r.Group, r.MemberID); m != nil && r.SessionTimeoutMillis > 0 {
			m.session = time.Duration(r.SessionTimeoutMillis) * time.Millisecond
		}
	case *kmsg.SyncGroupRequest:
		seen(r.Group, r.MemberID)
	case *kmsg.OffsetCommitRequest:
		seen(r.Group, r.MemberID)
	case *kmsg.LeaveGroupRequest:
		delete(kc.members, memberKey{r.Group, r.MemberID})
		for _, m := range r.Members {
			delete(kc.members, memberKey{r.Group, m.MemberID})
		}
	}
	return nil, nil, false
}

func (kc *KafkaCluster) reap(ctx context.Context) {
	defer close(kc.done)
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		kc.reapOnce(ctx)
	}
}

// reapOnce removes the members of stable groups that sent no group request
// for their session timeout, counted from the later of their last request
// and the moment the reaper first saw the group stable (a member waiting
// in a rebalance sends nothing, and a real broker restarts every member's
// session timer when the rebalance completes).
func (kc *KafkaCluster) reapOnce(ctx context.Context) {
	groups, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, kc.admin)
	if err != nil || len(groups.Groups) == 0 {
		return
	}
	desc := kmsg.NewPtrDescribeGroupsRequest()
	for _, g := range groups.Groups {
		if g.ProtocolType == "consumer" {
			desc.Groups = append(desc.Groups, g.Group)
		}
	}
	if len(desc.Groups) == 0 {
		return
	}
	resp, err := desc.RequestWith(ctx, kc.admin)
	if err != nil {
		return
	}
	now := time.Now()
	var gone []memberKey
	kc.mu.Lock()
	kc.forgetLocked(resp)
	for _, g := range resp.Groups {
		if g.ErrorCode != 0 || g.State != "Stable" {
			delete(kc.stable, g.Group)
			continue
		}
		since, ok := kc.stable[g.Group]
		if !ok {
			since = now
			kc.stable[g.Group] = now
		}
		for _, m := range g.Members {
			k := memberKey{g.Group, m.MemberID}
			s := kc.members[k]
			if s == nil { // not seen yet: its clock starts now
				kc.members[k] = &memberSeen{at: now, session: KafkaSessionTimeout}
				continue
			}
			if now.Sub(latest(s.at, since)) > s.session {
				gone = append(gone, k)
				delete(kc.members, k)
			}
		}
	}
	kc.mu.Unlock()
	for _, k := range gone {
		leave := kmsg.NewPtrLeaveGroupRequest()
		leave.Group = k.group
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = k.member
		m.Reason = kmsg.StringPtr("boxoffice: session timeout (in-process cluster reaper)")
		leave.Members = append(leave.Members, m)
		resp, err := leave.RequestWith(ctx, kc.admin)
		if err == nil && resp.ErrorCode == 0 && len(resp.Members) == 1 && resp.Members[0].ErrorCode == 0 {
			kc.evicted.Add(1)
		}
	}
}

// forgetLocked drops what the reaper keeps of groups no longer listed and
// of members no longer in their group (expired by kfake itself, or left),
// so a long run with many restarts does not accumulate them. A member
// that comes back is seen again at its next request.
func (kc *KafkaCluster) forgetLocked(resp *kmsg.DescribeGroupsResponse) {
	current := make(map[memberKey]bool)
	groups := make(map[string]bool, len(resp.Groups))
	for _, g := range resp.Groups {
		groups[g.Group] = true
		for _, m := range g.Members {
			current[memberKey{g.Group, m.MemberID}] = true
		}
	}
	for k := range kc.members {
		if !current[k] {
			delete(kc.members, k)
		}
	}
	for g := range kc.stable {
		if !groups[g] {
			delete(kc.stable, g)
		}
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
