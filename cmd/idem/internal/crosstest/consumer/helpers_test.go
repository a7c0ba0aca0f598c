package consumer_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/idemmetrics/idemmetricstest"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// bizTable creates the business table the handlers write their effect to:
// one row per handler run that committed (no unique key, so a duplicate
// effect would show as a second row).
func bizTable[TTx any](t *testing.T, d store.Driver[TTx]) {
	testdb.Exec(t, d, `CREATE TABLE biz_effects (message_id text NOT NULL, attempt integer NOT NULL, payload text NOT NULL)`)
}

// record writes msg's effect in tx.
func record[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, id string, attempt int, payload []byte) error {
	_, err := d.Tx(tx).Exec(ctx, `INSERT INTO biz_effects (message_id, attempt, payload) VALUES ($1, $2, $3)`, id, attempt, string(payload))
	return err
}

// effects returns the committed effect count of id ("" = all rows).
func effects[TTx any](t *testing.T, d store.Driver[TTx], id string) int {
	if id == "" {
		return testdb.Count(t, d, `SELECT count(*) FROM biz_effects`)
	}
	return testdb.Count(t, d, `SELECT count(*) FROM biz_effects WHERE message_id = $1`, id)
}

func newInbox[TTx any](t *testing.T, d store.Driver[TTx]) *inbox.Inbox[TTx] {
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// idemmetrics attaches to the consumer through Config.Observer.
var _ idem.Observer = (*idemmetrics.Metrics)(nil)

func newMetrics(t *testing.T) (*prometheus.Registry, *idemmetrics.Metrics) {
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// start runs c until the test ends (or stop is called) and checks that
// Run returned nil.
func start[TTx any](t *testing.T, c *consumer.Consumer[TTx]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or 30s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// value is idemmetricstest.Value.
func value(t *testing.T, g prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	return idemmetricstest.Value(t, g, name, labels)
}

// natsEnv is an embedded JetStream server with one stream.
type natsEnv struct {
	js      js.JetStream
	stream  string
	subject string
	pub     *idemjetstream.Publisher
}

// dupWindow is the test streams' duplicate window (JetStream's minimum),
// so a redrive can republish the original id shortly after.
const dupWindow = 100 * time.Millisecond

func startNATS(t *testing.T) *natsEnv {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return natsEnvAt(t, srv.ClientURL())
}

// natsEnvAt connects to the NATS server at url and creates a uniquely
// named stream there.
func natsEnvAt(t *testing.T, url string) *natsEnv {
	t.Helper()
	nc, j, err := idemjetstream.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	id := unique()
	env := &natsEnv{js: j, stream: "ORDERS_" + strings.ToUpper(id), subject: "orders." + id}
	if _, err := idemjetstream.EnsureStream(context.Background(), j, js.StreamConfig{Name: env.stream,
		Subjects: []string{env.subject}, Duplicates: dupWindow, Storage: js.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	env.pub, err = idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// unique returns a random name suffix.
func unique() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *natsEnv) subscriber(t *testing.T, durable string, ackWait time.Duration) *idemjetstream.Subscriber {
	t.Helper()
	s, err := idemjetstream.NewSubscriber(context.Background(), e.js, idemjetstream.SubscriberConfig{Stream: e.stream,
		Durable: durable, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sqlTx is database/sql's transaction type, as the sqlstore driver uses it.
type sqlTx = sql.Tx

func newInboxB[TTx any](b *testing.B, d store.Driver[TTx]) (*inbox.Inbox[TTx], error) {
	return inbox.New(d, inbox.Config{})
}

func memBroker(t *testing.T) *memory.Broker {
	b, err := memory.New(memory.Config{AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
