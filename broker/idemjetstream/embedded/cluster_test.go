package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	idemjs "github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

// TestClusterLeaderKill: on a three-node cluster with a three-replica
// stream, killing the stream's leader elects another node; publishing
// (through the whole server list) and consuming go on, and after the
// killed node's restart every message published before, during and after
// the kill is consumed, none missing.
func TestClusterLeaderKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	if c.Nodes() != 3 {
		t.Fatalf("Nodes = %d", c.Nodes())
	}
	nc, js, err := idemjs.Dial(c.ClientURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const stream = "CLUSTER_TEST"
	if _, err := idemjs.EnsureStream(ctx, js, jetstream.StreamConfig{Name: stream, Subjects: []string{"ct.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	pub, err := idemjs.NewPublisher(js, idemjs.PublisherConfig{AckTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// publish retries a message until its PubAck arrives, as the relay
	// does: the same Nats-Msg-Id, so a publish whose ack was lost in the
	// leader change is stored once.
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			m := idem.Message{ID: fmt.Sprintf("m-%04d", i), Subject: "ct.x", Payload: []byte("p")}
			for {
				if err := pub.Publish(ctx, m); err == nil {
					break
				} else if ctx.Err() != nil {
					t.Fatalf("publish %s: %v", m.ID, err)
				}
			}
		}
	}
	publish(0, 100)

	leader := waitLeader(ctx, t, c, stream, -1)
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if c.Running(leader) {
		t.Fatalf("node %d still running after Kill", leader)
	}
	next := waitLeader(ctx, t, c, stream, leader)
	t.Logf("leader %s killed, %s elected", c.NodeName(leader), c.NodeName(next))
	publish(100, 200)
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	publish(200, 300)

	sub, err := idemjs.NewSubscriber(ctx, js, idemjs.SubscriberConfig{Stream: stream, Durable: "d"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 300 {
		ds, err := sub.Fetch(ctx, 100, time.Second)
		if errors.Is(err, broker.ErrUnavailable) && ctx.Err() == nil {
			// The new durable is replicated too: until its own leader
			// is elected a fetch finds no responder. The consumer
			// retries such a fetch (consumer.Consumer), and so does
			// this loop, within the test's deadline.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("fetch after %d: %v", len(seen), err)
		}
		for _, d := range ds {
			seen[d.Message().ID] = true
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 300 {
		if id := fmt.Sprintf("m-%04d", i); !seen[id] {
			t.Errorf("%s lost", id)
		}
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 300 {
		t.Errorf("stream holds %d messages, want 300 (a retried publish stored twice?)", info.State.Msgs)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("stream cluster info %+v, want a leader and two replicas", info.Cluster)
	}
}

// waitLeader waits for a node other than not to lead the stream.
func waitLeader(ctx context.Context, t *testing.T, c *embedded.Cluster, stream string, not int) int {
	t.Helper()
	for {
		if i := c.StreamLeader(stream); i >= 0 && i != not {
			return i
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no new leader of %s: %v", stream, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestClusterConfig: fewer than three nodes and a non-loopback host are
// refused.
func TestClusterConfig(t *testing.T) {
	for _, cfg := range []embedded.ClusterConfig{{Nodes: 2}, {Host: "0.0.0.0"}} {
		if _, err := embedded.StartCluster(context.Background(), cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
