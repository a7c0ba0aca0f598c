package drill

import (
	"context"
	"errors"
)

// ClusterReport is what a --nats-cluster run did to its cluster.
type ClusterReport struct {
	// Nodes is the cluster's size.
	Nodes int `json:"nodes"`
	// NodeKills counts the nodes killed (and restarted).
	NodeKills int `json:"node_kills"`
	// LeaderChanges counts the stream leader changes observed.
	LeaderChanges int `json:"leader_changes"`
}

// natsCluster is the drill's embedded JetStream cluster and the loop that
// kills its nodes.
type natsCluster struct{}

// startCluster starts the cluster of r.cfg.NATSCluster nodes and points
// the run at it (r.cfg.NATSURL becomes the list of its client URLs).
func (r *runner) startCluster(context.Context) (*natsCluster, error) {
	return nil, errors.New("drill: --nats-cluster is not built yet")
}

// stop stops the kill loop and the nodes and reports what happened.
func (c *natsCluster) stop() *ClusterReport { return &ClusterReport{} }
