package embedded

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
)

// ClusterConfig configures a [Cluster].
type ClusterConfig struct {
	// Nodes is the number of servers. At least 3 (a JetStream cluster
	// needs a quorum that survives one node). Defaults to 3.
	Nodes int
	// DataDir holds one store directory per node (DataDir/<node name>).
	// Defaults to a new temporary directory, removed by Shutdown.
	DataDir string
	// Host is the listen address of every node, client and cluster ports
	// alike; it must be a loopback address. Defaults to 127.0.0.1.
	Host string
	// Name is the cluster's name; the nodes are named <Name>-0, <Name>-1,
	// … Defaults to "idem-embedded".
	Name string
	// StartTimeout bounds the wait for a node to accept connections.
	// Defaults to 10s.
	StartTimeout time.Duration
	// Logger receives the servers' logs. Defaults to discard.
	Logger *slog.Logger
}

// Cluster is a JetStream cluster of embedded servers in this process,
// each with its own store directory, client port and cluster (route)
// port on loopback. Clients and routes both authenticate with the user
// [User] and one random password per Cluster, so no other local process
// can publish, subscribe or join the cluster as a route.
//
// [Cluster.Kill] shuts a node down and [Cluster.Restart] starts it again
// on the same ports and store directory: that is the drills' node kill.
// Being in-process, a kill is a server shutdown, not a SIGKILL: the node
// first steps down from the Raft groups it leads (as nats-server does on
// SIGTERM), so a new leader is elected at once rather than after the
// followers' election timeout. The store is on disk, so a restarted node
// keeps its streams and catches up from the others. Safe for concurrent
// use.
type Cluster struct {
	cfg      ClusterConfig
	log      *slog.Logger
	tempDir  bool
	password string

	mu    sync.Mutex // protects the nodes' srv
	nodes []*clusterNode
}

type clusterNode struct {
	name      string
	dir       string
	port      int // client port
	routePort int
	srv       *server.Server // nil when killed
}

// ErrNoNode is returned for a node index outside the cluster.
var ErrNoNode = errors.New("embedded: no such cluster node")

// StartCluster starts cfg.Nodes servers and waits until every one is
// healthy (JetStream is current with the meta leader).
func StartCluster(ctx context.Context, cfg ClusterConfig) (_ *Cluster, err error) {
	cfg.Nodes = cmp.Or(cfg.Nodes, 3)
	cfg.Host = cmp.Or(cfg.Host, "127.0.0.1")
	cfg.Name = cmp.Or(cfg.Name, "idem-embedded")
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 10*time.Second)
	switch {
	case cfg.Nodes < 3:
		return nil, checks.Optionf("embedded: a cluster needs at least 3 nodes, not %d", cfg.Nodes)
	case !isLoopback(cfg.Host):
		return nil, checks.Optionf("embedded: host %q is not a loopback address", cfg.Host)
	case cfg.StartTimeout < 0:
		return nil, checks.Optionf("embedded: negative StartTimeout")
	}
	c := &Cluster{cfg: cfg, log: obs.Component(cfg.Logger, "broker/jetstream/embedded"), password: rand.Text()}
	if cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "idem-nats-cluster-*")
		if err != nil {
			return nil, fmt.Errorf("embedded: data dir: %w", err)
		}
		c.cfg.DataDir, c.tempDir = dir, true
	}
	defer func() {
		if err != nil {
			c.Shutdown()
		}
	}()
	ports, err := freePorts(cfg.Host, 2*cfg.Nodes)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		name := fmt.Sprintf("%s-%d", cfg.Name, i)
		c.nodes = append(c.nodes, &clusterNode{
			name: name, dir: filepath.Join(c.cfg.DataDir, name),
			port: ports[2*i], routePort: ports[2*i+1],
		})
	}
	for i := range c.nodes {
		if err := c.Restart(i); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// freePorts returns n distinct free TCP ports on host. They are free when
// returned; a node binds its two a moment later.
func freePorts(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("embedded: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) node(i int) (*clusterNode, error) {
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("%w: %d of %d", ErrNoNode, i, len(c.nodes))
	}
	return c.nodes[i], nil
}

// Restart starts node i (again) on its ports and store directory and
// waits until it accepts connections; it is a no-op when the node runs.
// It does not wait for the node to catch up: see [Cluster.WaitHealthy].
func (c *Cluster) Restart(i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.srv != nil {
		return nil
	}
	var routes []*url.URL
	for _, peer := range c.nodes {
		if peer != n {
			routes = append(routes, &url.URL{Scheme: "nats-route", User: url.UserPassword(User, c.password),
				Host: net.JoinHostPort(c.cfg.Host, fmt.Sprint(peer.routePort))})
		}
	}
	opts := &server.Options{
		ServerName: n.name,
		Host:       c.cfg.Host,
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.dir,
		Username:   User,
		Password:   c.password,
		Cluster: server.ClusterOpts{
			Name:     c.cfg.Name,
			Host:     c.cfg.Host,
			Port:     n.routePort,
			Username: User,
			Password: c.password,
		},
		Routes: routes,
		NoSigs: true,
		NoLog:  c.cfg.Logger == nil,
	}
	srv, err := runServer(opts, c.cfg.Logger != nil, c.log.With("node", n.name), c.cfg.StartTimeout)
	if err != nil {
		return err
	}
	n.srv = srv
	c.log.Info("embedded JetStream node started", "node", n.name, "url", c.address(n))
	return nil
}

// Kill shuts node i down and waits until it has stopped, keeping its
// store directory for [Cluster.Restart]; it is a no-op when the node is
// down. See [Cluster] for what a kill is.
func (c *Cluster) Kill(i int) error {
	n, err := c.node(i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	srv := n.srv
	n.srv = nil
	c.mu.Unlock()
	if srv == nil {
		return nil
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	c.log.Info("embedded JetStream node killed", "node", n.name)
	return nil
}

// Running reports whether node i is up.
func (c *Cluster) Running(i int) bool {
	n, err := c.node(i)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.srv != nil && n.srv.Running()
}

// Nodes returns the number of nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// NodeName returns node i's server name ("" for no such node), the name
// JetStream reports as a stream's leader or replica.
func (c *Cluster) NodeName(i int) string {
	n, err := c.node(i)
	if err != nil {
		return ""
	}
	return n.name
}

// NodeIndex returns the index of the node named name, or -1.
func (c *Cluster) NodeIndex(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// ClientURLs returns the comma-separated client URLs of every node,
// nats://idem:<password>@127.0.0.1:port,…: nats.Connect takes the list
// and fails over between its servers. It carries the credentials, so
// treat it as a secret, as [Server.ClientURL].
func (c *Cluster) ClientURLs() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		u := url.URL{Scheme: "nats", User: url.UserPassword(User, c.password), Host: c.hostPort(n)}
		urls[i] = u.String()
	}
	return strings.Join(urls, ",")
}

// Addresses returns the nodes' client addresses without credentials, for
// printing.
func (c *Cluster) Addresses() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = c.address(n)
	}
	return strings.Join(urls, ",")
}

func (c *Cluster) address(n *clusterNode) string { return "nats://" + c.hostPort(n) }

func (c *Cluster) hostPort(n *clusterNode) string {
	return net.JoinHostPort(c.cfg.Host, fmt.Sprint(n.port))
}

// Healthy reports whether every node is up and healthy: JetStream is
// enabled, in contact with the meta leader, and every stream and consumer
// replica on the node is current (nats-server's /healthz); and the meta
// leader has current JetStream statistics from every node, without which
// it refuses to place a stream on them ("no suitable peers for
// placement", as a stream of Nodes replicas created right after start
// could be).
func (c *Cluster) Healthy() bool {
	c.mu.Lock()
	srvs := make([]*server.Server, len(c.nodes))
	for i, n := range c.nodes {
		srvs[i] = n.srv
	}
	c.mu.Unlock()
	for _, s := range srvs {
		if s == nil || !s.Running() {
			return false
		}
		if h := s.Healthz(nil); h == nil || h.Status != "ok" {
			return false
		}
	}
	for _, s := range srvs {
		if s.JetStreamIsLeader() {
			return len(s.JetStreamClusterPeers()) == len(srvs)
		}
	}
	return false // no meta leader yet
}

// WaitHealthy waits until [Cluster.Healthy] or ctx is done (then it
// returns ctx's error joined with broker.ErrUnavailable).
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !c.Healthy() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedded: cluster not healthy: %w", errors.Join(ctx.Err(), broker.ErrUnavailable))
		case <-t.C:
		}
	}
	return nil
}

// StreamLeader returns the index of the node leading the stream of the
// default account (the account of [User]), or -1 when no running node
// leads it (an election is under way, or there is no such stream).
func (c *Cluster) StreamLeader(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n.srv != nil && n.srv.Running() && n.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// Shutdown stops every node and, if StartCluster created a temporary
// data directory, removes it.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { _ = c.Kill(i) })
	}
	wg.Wait()
	if c.tempDir {
		_ = os.RemoveAll(c.cfg.DataDir)
	}
}

// Close is Shutdown returning nil, for io.Closer.
func (c *Cluster) Close() error {
	c.Shutdown()
	return nil
}
