package boxoffice_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	natsjs "github.com/nats-io/nats.go/jetstream"

	idemjs "github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

// TestDialJetStreamReplicas: on a three-node cluster (the list of its
// servers as the URL) a new stream gets three replicas; dialled again
// without Replicas, as a worker does, it keeps them; on a single server
// a new stream has one.
func TestDialJetStreamReplicas(t *testing.T) {
	ctx, c := startCluster(t)
	replicas := func(url, stream string) int {
		t.Helper()
		b, err := boxoffice.DialJetStream(ctx, boxoffice.JetStreamConfig{URL: url, Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sub, err := b.Subscriber(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		nc, js, err := idemjs.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.Replicas
	}
	if n := replicas(c.ClientURLs(), "R"); n != 3 {
		t.Errorf("new stream on the cluster: %d replicas, want 3", n)
	}
	if n := replicas(c.ClientURLs(), "R"); n != 3 {
		t.Errorf("stream dialled again: %d replicas, want 3 kept", n)
	}
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if n := replicas(srv.ClientURL(), "S"); n != 1 {
		t.Errorf("new stream on one server: %d replicas, want 1", n)
	}
}

// TestDialJetStreamNoQuorum: with two nodes of three down the cluster
// has no meta leader and cannot create a stream; DialJetStream retries
// and succeeds once they are back, instead of failing the system's start.
func TestDialJetStreamNoQuorum(t *testing.T) {
	ctx, c := startCluster(t)
	for _, i := range []int{1, 2} {
		if err := c.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	nc, js, err := idemjs.Dial(c.ClientURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The condition DialJetStream must ride out.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = idemjs.EnsureStream(pctx, js, natsjs.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}})
	pcancel()
	if err == nil {
		t.Fatal("a stream was created without a quorum")
	}
	t.Logf("without a quorum: %v", err)
	dialed := make(chan error, 1)
	go func() {
		b, err := boxoffice.DialJetStream(ctx, boxoffice.JetStreamConfig{URL: c.ClientURLs(), Stream: "LATE"})
		if err == nil {
			b.Close()
		}
		dialed <- err
	}()
	for _, i := range []int{1, 2} {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-dialed; err != nil {
		t.Fatalf("DialJetStream after the nodes came back: %v", err)
	}
	if _, err := js.Stream(ctx, "LATE"); err != nil {
		t.Fatal(err)
	}
}

// startCluster starts a three-node cluster, shut down at the test's end,
// and returns it with a context bounding the test.
func startCluster(t *testing.T) (context.Context, *embedded.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return ctx, c
}
