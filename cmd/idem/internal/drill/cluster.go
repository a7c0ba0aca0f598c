package drill

// This file holds the drill's JetStream cluster (--nats-cluster N): the
// embedded nodes, the loop that kills them and the watch that counts the
// stream leader changes.

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	bjs "github.com/idemkit/idem/broker/jetstream"
	"github.com/idemkit/idem/broker/jetstream/embedded"
)

// ClusterReport is what a --nats-cluster run did to its cluster.
type ClusterReport struct {
	// Nodes is the cluster's size.
	Nodes int `json:"nodes"`
	// NodeKills counts the nodes killed (and restarted).
	NodeKills int `json:"node_kills"`
	// LeaderChanges counts the stream leader changes observed.
	LeaderChanges int `json:"leader_changes"`
	// StreamReplicas is the fewest replicas (leader included) seen on a
	// scenario's stream: 3 when every stream was replicated.
	StreamReplicas int `json:"stream_replicas"`
}

// Chaos timing of the kill loop: after the cluster is healthy again it
// waits killGap, kills a node, and restarts it after a pause drawn from
// [killPauseMin, killPauseMax].
const (
	killGap      = 500 * time.Millisecond
	killPauseMin = time.Second
	killPauseMax = 3 * time.Second
	// followerOdds: one kill in followerOdds is of a random follower of
	// the stream, the others of its leader.
	followerOdds = 4
	// leaderPoll is how often the watch asks for every stream's leader.
	leaderPoll = 100 * time.Millisecond
)

// natsCluster is the drill's embedded JetStream cluster and the loop that
// kills its nodes.
type natsCluster struct {
	c      *embedded.Cluster
	nc     *nats.Conn // the loop's and the watch's own connection
	js     jetstream.JetStream
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // protects the counts
	kills    int
	changes  int
	replicas int // the fewest seen, 0 before the first
}

// startCluster starts the cluster of r.cfg.NATSCluster nodes and points
// the run at it (r.cfg.NATSURL becomes the list of its client URLs, so
// every scenario, and every --processes child through IDEM_NATS_URL,
// connects with the whole list), then starts the kill loop and the leader
// watch for the whole drill: every scenario's stream is a target, the
// load scenarios (many orders, so most of the run) the most exposed.
func (r *runner) startCluster(ctx context.Context) (*natsCluster, error) {
	c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{
		Nodes:   r.cfg.NATSCluster,
		DataDir: filepath.Join(r.tmp, "nats-cluster"),
		Name:    "idem-drill",
	})
	if err != nil {
		return nil, err
	}
	nc, js, err := bjs.Dial(c.ClientURLs())
	if err != nil {
		c.Shutdown()
		return nil, err
	}
	r.cfg.NATSURL = c.ClientURLs()
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := &natsCluster{c: c, nc: nc, js: js, cancel: cancel}
	n.wg.Go(func() { n.killLoop(lctx) })
	n.wg.Go(func() { n.watchLeaders(lctx) })
	return n, nil
}

// stop stops the kill loop (restarting the node it has down) and the
// watch, then the nodes, and reports what happened.
func (c *natsCluster) stop() *ClusterReport {
	c.cancel()
	c.wg.Wait()
	c.nc.Close()
	c.c.Shutdown()
	c.mu.Lock()
	defer c.mu.Unlock()
	return &ClusterReport{Nodes: c.c.Nodes(), NodeKills: c.kills, LeaderChanges: c.changes, StreamReplicas: c.replicas}
}

// killLoop, until ctx is done: waits for the cluster to be healthy (every
// node up and current), picks one of the streams, kills its leader (or,
// one time in followerOdds, a follower) and restarts it after a pause.
func (c *natsCluster) killLoop(ctx context.Context) {
	for {
		if c.c.WaitHealthy(ctx) != nil || !sleep(ctx, killGap) {
			return
		}
		streams := c.streams(ctx)
		if len(streams) == 0 {
			continue
		}
		stream := streams[rand.IntN(len(streams))]
		victim := c.c.StreamLeader(stream)
		if victim < 0 {
			continue // an election is under way
		}
		if rand.IntN(followerOdds) == 0 {
			victim = (victim + 1 + rand.IntN(c.c.Nodes()-1)) % c.c.Nodes()
		}
		if c.c.Kill(victim) != nil {
			continue
		}
		c.mu.Lock()
		c.kills++
		c.mu.Unlock()
		pause := killPauseMin + rand.N(killPauseMax-killPauseMin)
		sleep(ctx, pause)
		// Restart even when ctx is done: stop shuts down a whole cluster.
		for try := 0; c.c.Restart(victim) != nil && try < 50; try++ {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// watchLeaders polls every stream's leader (StreamInfo.Cluster.Leader)
// and counts the changes: a leader that differs from the last one seen
// for the stream. An election in progress (no leader) is not a change by
// itself; the leader it elects is, if it is another node.
func (c *natsCluster) watchLeaders(ctx context.Context) {
	last := map[string]string{}
	for sleep(ctx, leaderPoll) {
		for _, name := range c.streams(ctx) {
			leader, replicas := c.leader(ctx, name)
			if leader == "" {
				continue
			}
			c.mu.Lock()
			if prev, ok := last[name]; ok && prev != leader {
				c.changes++
			}
			if c.replicas == 0 || replicas < c.replicas {
				c.replicas = replicas
			}
			c.mu.Unlock()
			last[name] = leader
		}
	}
}

// streams returns the names of the cluster's streams (none when the
// cluster does not answer in time).
func (c *natsCluster) streams(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	names := c.js.StreamNames(ctx)
	var out []string
	for n := range names.Name() {
		out = append(out, n)
	}
	return out
}

// leader returns the stream's leader as JetStream reports it and the
// number of its peers (leader and replicas, current or not); "" when
// there is none or the cluster does not answer in time.
func (c *natsCluster) leader(ctx context.Context, stream string) (string, int) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return "", 0
	}
	if ci := s.CachedInfo().Cluster; ci != nil {
		return ci.Leader, 1 + len(ci.Replicas)
	}
	return "", 0
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
