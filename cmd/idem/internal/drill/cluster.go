package drill

// This file holds the drill's JetStream cluster (--nats-cluster N): the
// embedded nodes, the loop that kills them and the watch that counts the
// stream leader changes.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	bjs "github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

// ClusterReport is what a --nats-cluster run did to its cluster.
type ClusterReport struct {
	// Nodes is the cluster's size.
	Nodes int `json:"nodes"`
	// NodeKills counts the nodes killed (and restarted).
	NodeKills int `json:"node_kills"`
	// LeaderChanges counts the stream leader changes observed.
	LeaderChanges int `json:"leader_changes"`
	// StepDowns counts the leader step-downs the drill requested: its
	// chaos on an external cluster, whose nodes it cannot kill.
	StepDowns int `json:"step_downs,omitempty"`
	// StreamReplicas is the fewest replicas (leader included) seen on a
	// scenario's stream: 3 when every stream was replicated.
	StreamReplicas int `json:"stream_replicas"`
}

// String is the report's line in the human report: "cluster: 3 nodes, 12
// node kills, 9 leader changes, streams of 3 replicas".
func (c ClusterReport) String() string {
	s := fmt.Sprintf("cluster: %d nodes, %d node kills", c.Nodes, c.NodeKills)
	if c.StepDowns > 0 {
		s += fmt.Sprintf(", %d leader step-downs", c.StepDowns)
	}
	return s + fmt.Sprintf(", %d leader changes, streams of %d replicas", c.LeaderChanges, c.StreamReplicas)
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
	c      *embedded.Cluster // nil on an external cluster
	nodes  int
	nc     *nats.Conn // the loop's and the watch's own connection
	js     jetstream.JetStream
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex // protects the counts
	kills     int
	stepDowns int
	changes   int
	replicas  int // the fewest seen, 0 before the first
}

// drillStreamPrefix begins the name of every scenario's stream (see
// scenarioBroker): the only streams the chaos touches.
const drillStreamPrefix = "IDEM_DRILL_"

// clustered reports whether the run is on a JetStream cluster: the
// embedded one of --nats-cluster, or an external --nats list of three
// servers or more.
func (c Config) clustered() bool {
	return c.NATSCluster > 0 || (c.NATSURL != "" && len(strings.Split(c.NATSURL, ",")) >= 3)
}

// startCluster starts the cluster of r.cfg.NATSCluster nodes and points
// the run at it (r.cfg.NATSURL becomes the list of its client URLs, so
// every scenario, and every --processes child through IDEM_NATS_URL,
// connects with the whole list), then starts the kill loop and the leader
// watch for the whole drill: every scenario's stream is a target, the
// load scenarios (many orders, so most of the run) the most exposed.
//
// On an external cluster (an --nats list, see [Config.clustered]) the
// drill owns no node, so it cannot kill one: it asks the leader of a
// scenario's stream to step down instead (the JetStream API's
// STREAM.LEADER.STEPDOWN), at the same pace, and watches the leaders the
// same way. It returns nil (no chaos, no report) when the servers are not
// a cluster.
func (r *runner) startCluster(ctx context.Context) (*natsCluster, error) {
	var c *embedded.Cluster
	if r.cfg.NATSCluster > 0 {
		var err error
		c, err = embedded.StartCluster(ctx, embedded.ClusterConfig{
			Nodes:   r.cfg.NATSCluster,
			DataDir: filepath.Join(r.tmp, "nats-cluster"),
			Name:    "idem-drill",
		})
		if err != nil {
			return nil, err
		}
		r.cfg.NATSURL = c.ClientURLs()
	}
	nc, js, err := bjs.Dial(r.cfg.NATSURL)
	if err != nil {
		if c != nil {
			c.Shutdown()
		}
		return nil, err
	}
	n := &natsCluster{c: c, nc: nc, js: js, nodes: len(nc.Servers())}
	switch {
	case c != nil:
		n.nodes = c.Nodes()
	case nc.ConnectedClusterName() == "":
		nc.Close()
		return nil, nil
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	if c != nil {
		n.wg.Go(func() { n.killLoop(lctx) })
	} else {
		n.wg.Go(func() { n.stepDownLoop(lctx) })
	}
	n.wg.Go(func() { n.watchLeaders(lctx) })
	return n, nil
}

// stop stops the kill loop (restarting the node it has down) and the
// watch, then the nodes, and reports what happened.
// A nil c (servers that are no cluster) reports nil.
func (c *natsCluster) stop() *ClusterReport {
	if c == nil {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	c.nc.Close()
	if c.c != nil {
		c.c.Shutdown()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return &ClusterReport{Nodes: c.nodes, NodeKills: c.kills, StepDowns: c.stepDowns, LeaderChanges: c.changes, StreamReplicas: c.replicas}
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

// stepDownLoop, until ctx is done: picks one of the streams, waits until
// it has a leader and every replica is current, asks its leader to step
// down (another replica is elected), and pauses as long as a killed node
// stays down.
func (c *natsCluster) stepDownLoop(ctx context.Context) {
	for {
		if !sleep(ctx, killGap) {
			return
		}
		streams := c.streams(ctx)
		if len(streams) == 0 {
			continue
		}
		stream := streams[rand.IntN(len(streams))]
		if !c.streamHealthy(ctx, stream) {
			continue
		}
		m, err := c.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
		if err != nil {
			continue
		}
		var resp struct {
			Success bool `json:"success"`
		}
		if json.Unmarshal(m.Data, &resp) == nil && resp.Success {
			c.mu.Lock()
			c.stepDowns++
			c.mu.Unlock()
			sleep(ctx, killPauseMin+rand.N(killPauseMax-killPauseMin))
		}
	}
}

// streamHealthy reports whether the stream has a leader and every replica
// is online and current.
func (c *natsCluster) streamHealthy(ctx context.Context, stream string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return false
	}
	ci := s.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" {
		return false
	}
	for _, p := range ci.Replicas {
		if !p.Current || p.Offline {
			return false
		}
	}
	return true
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

// streams returns the names of the scenarios' streams (none when the
// cluster does not answer in time).
func (c *natsCluster) streams(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	names := c.js.StreamNames(ctx)
	var out []string
	for n := range names.Name() {
		if strings.HasPrefix(n, drillStreamPrefix) {
			out = append(out, n)
		}
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
