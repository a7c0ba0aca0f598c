package drill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/cmd/idem/internal/drill"
)

// TestDrillNATSCluster runs load scenarios on an embedded three-node
// JetStream cluster whose stream leaders are killed while they run: every
// invariant holds, and the report counts the kills and leader changes.
func TestDrillNATSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	rep, c := runClustered(t, drill.Config{NATSCluster: 3, Seed: 11,
		Scenarios: []string{"lost-response", "racing-duplicates", "relay-double-publish"}})
	if c.Nodes != 3 || c.StreamReplicas != 3 {
		t.Errorf("nodes = %d, stream replicas = %d, want 3 and 3", c.Nodes, c.StreamReplicas)
	}
	// The kill loop starts on the first scenario's stream, and each
	// scenario publishes and consumes a few hundred messages.
	if c.NodeKills < 1 {
		t.Errorf("no node killed: %+v", *c)
	}
	// The counts are in both reports; the JSON names are an interface.
	var table, js bytes.Buffer
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), c.String()) {
		t.Errorf("table lacks %q:\n%s", c.String(), table.String())
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Cluster map[string]int `json:"cluster"`
	}
	if err := json.Unmarshal(js.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]int{"nodes": c.Nodes, "node_kills": c.NodeKills, "leader_changes": c.LeaderChanges} {
		if got, ok := v.Cluster[k]; !ok || got != want {
			t.Errorf("JSON cluster.%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
}

// runClustered runs cfg's scenarios, shortened, checks that each passed
// and returns the report and its cluster part.
func runClustered(t *testing.T, cfg drill.Config) (drill.Report, *drill.ClusterReport) {
	t.Helper()
	cfg.Orders, cfg.Workers, cfg.TempDir = 200, 4, t.TempDir()
	rep, err := drill.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, len(cfg.Scenarios))
	if rep.Cluster == nil {
		t.Fatal("no cluster report")
	}
	t.Log(*rep.Cluster)
	return rep, rep.Cluster
}

// TestDrillNATSClusterConfig: a cluster of fewer than three nodes, or one
// combined with --nats, is refused.
func TestDrillNATSClusterConfig(t *testing.T) {
	for _, cfg := range []drill.Config{{NATSCluster: 2}, {NATSCluster: 3, NATSURL: "nats://127.0.0.1:4222"}} {
		if _, err := drill.Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// TestDrillExternalNATSCluster runs scenarios against a cluster the drill
// does not own (here an embedded one, given as an --nats list): its
// streams get three replicas and their leaders are asked to step down.
func TestDrillExternalNATSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	ctx := context.Background()
	c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	_, r := runClustered(t, drill.Config{NATSURL: c.ClientURLs(), Seed: 12,
		Scenarios: []string{"lost-response", "crash-before-ack"}})
	if r.Nodes != 3 || r.StreamReplicas != 3 || r.NodeKills != 0 {
		t.Errorf("report %+v, want 3 nodes, 3 stream replicas, no kills", *r)
	}
	if r.StepDowns < 1 {
		t.Errorf("no step-down: %+v", *r)
	}
}
