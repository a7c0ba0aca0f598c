package idemjetstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/brokertest"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

const ackWait = 500 * time.Millisecond

func startEmbedded(t *testing.T) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func dial(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, js.JetStream) {
	t.Helper()
	nc, j, err := idemjetstream.Dial(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, j
}

func unique() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newStream creates a uniquely named stream on subject idemtest.<id> and
// deletes it when the test ends.
func newStream(t testing.TB, j js.JetStream) (stream, subject string) {
	t.Helper()
	id := unique()
	stream, subject = "IDEMTEST_"+strings.ToUpper(id), "idemtest."+id
	ctx := context.Background()
	if _, err := idemjetstream.EnsureStream(ctx, j, js.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), stream) })
	return stream, subject
}

func harness(j js.JetStream) func(t *testing.T) brokertest.Harness {
	return func(t *testing.T) brokertest.Harness {
		stream, subject := newStream(t, j)
		pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return brokertest.Harness{
			Publisher: pub,
			Subject:   subject,
			AckWait:   ackWait,
			DedupByID: true,
			Subscribe: func(t *testing.T, name string) broker.Subscriber {
				s, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream, Durable: name, AckWait: ackWait})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	}
}

func TestConformanceEmbedded(t *testing.T) {
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	brokertest.Run(t, harness(j))
}

func TestConformanceNATSServer(t *testing.T) {
	url := os.Getenv("IDEM_TEST_NATS_URL")
	if url == "" {
		t.Skip("IDEM_TEST_NATS_URL not set; export IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 to run against a real nats-server")
	}
	_, j := dial(t, url)
	brokertest.Run(t, harness(j))
}

func TestDuplicateReported(t *testing.T) {
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	_, subject := newStream(t, j)
	var seen []broker.PublishResult
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{OnResult: func(r broker.PublishResult) { seen = append(seen, r) }})
	if err != nil {
		t.Fatal(err)
	}
	m := idem.Message{ID: "evt-1", Subject: subject, Payload: []byte("x")}
	first, err := pub.PublishResults(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	// A relay that crashed after the PubAck and before marking the row
	// publishes the same event again.
	again, err := pub.PublishResults(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Duplicate || !again[0].Duplicate || again[0].Position != first[0].Position {
		t.Fatalf("first %+v, again %+v: want the second reported as a duplicate of the first", first[0], again[0])
	}
	if pub.Duplicates() != 1 || pub.Published() != 2 || len(seen) != 2 {
		t.Fatalf("duplicates %d published %d results %d", pub.Duplicates(), pub.Published(), len(seen))
	}
}

func TestEmbeddedRestartKeepsMessages(t *testing.T) {
	srv := startEmbedded(t)
	url := srv.ClientURL()
	_, j := dial(t, url, nats.ReconnectWait(20*time.Millisecond))
	stream, subject := newStream(t, j)
	pub, _ := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{AckTimeout: 200 * time.Millisecond})
	if err := pub.Publish(t.Context(), idem.Message{ID: "before", Subject: subject}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err := pub.Publish(ctx, idem.Message{ID: "during", Subject: subject})
	cancel()
	if err == nil {
		t.Fatal("publish succeeded while the server was down")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if srv.ClientURL() != url {
		t.Fatalf("URL changed across restart: %s → %s", url, srv.ClientURL())
	}
	// The client reconnects by itself; retry like a relay would.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := pub.Publish(ctx, idem.Message{ID: "during", Subject: subject}, idem.Message{ID: "after", Subject: subject})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sub, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream, Durable: "c"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for len(ids) < 3 && time.Now().Before(deadline) {
		ds, err := sub.Fetch(t.Context(), 10, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			ids[d.Message().ID]++
			_ = d.Ack(t.Context())
		}
	}
	// "during" may have been buffered by the client and stored after the
	// reconnect; the duplicate window keeps it to one copy either way.
	if ids["before"] != 1 || ids["during"] != 1 || ids["after"] != 1 || len(ids) != 3 {
		t.Fatalf("after restart got %v", ids)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := embedded.New(embedded.Config{Host: "0.0.0.0"}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("non-loopback host: %v", err)
	}
	if _, err := idemjetstream.NewPublisher(nil, idemjetstream.PublisherConfig{}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("nil js: %v", err)
	}
	if _, err := idemjetstream.NewSubscriber(t.Context(), nil, idemjetstream.SubscriberConfig{}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("nil js: %v", err)
	}
}

// TestNoStreamIsNotAnOutage: a subject that no stream covers is a
// configuration mistake, told apart from an unreachable broker: a permanent
// broker.ErrNoRoute that names the subject (a relay parks the event with
// it), not broker.ErrUnavailable (a relay would pause forever).
func TestNoStreamIsNotAnOutage(t *testing.T) {
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	_, covered := newStream(t, j)
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	subject := "idemtest.uncovered." + unique()
	_, err = pub.PublishResults(t.Context(), idem.Message{ID: "evt-1", Subject: subject, Payload: []byte("x")})
	if !errors.Is(err, broker.ErrNoRoute) || !idem.IsPermanent(err) || errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("publish to an uncovered subject: %v; want a permanent broker.ErrNoRoute, not ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), `no stream covers subject "`+subject+`"`) {
		t.Fatalf("the error does not name the subject: %v", err)
	}
	if _, err := pub.PublishResults(t.Context(), idem.Message{ID: "evt-2", Subject: covered, Payload: []byte("x")}); err != nil {
		t.Fatalf("a covered subject after it: %v", err)
	}
	// A server that is gone is still an outage.
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = pub.PublishResults(ctx, idem.Message{ID: "evt-3", Subject: subject, Payload: []byte("x")})
	if err == nil || errors.Is(err, broker.ErrNoRoute) || idem.IsPermanent(err) {
		t.Fatalf("publish with the server gone: %v; want a retryable error, not ErrNoRoute", err)
	}
}

// MaxDeliveries reports the durable consumer's MaxDeliver as the server
// holds it, so a consumer can refuse one below its MaxAttempts; the
// default is unlimited.
func TestMaxDeliveries(t *testing.T) {
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	stream, _ := newStream(t, j)
	var _ broker.DeliveryLimiter = (*idemjetstream.Subscriber)(nil)
	for _, c := range []struct{ set, want int }{{0, -1}, {3, 3}, {20, 20}} {
		sub, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream, Durable: "d" + unique(), MaxDeliver: c.set})
		if err != nil {
			t.Fatal(err)
		}
		if got := sub.MaxDeliveries(); got != c.want {
			t.Errorf("MaxDeliver %d: MaxDeliveries() = %d, want %d", c.set, got, c.want)
		}
		_ = sub.Close()
	}
}
