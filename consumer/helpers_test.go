package consumer_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/obs"
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

// observed is an idem.Observer that counts what the consumer reports,
// under the names idemmetrics gives those counts (its own tests check the
// metrics); labels are "key=value" pairs in key order.
type observed struct {
	obs.NopObserver // what the consumer does not report
	mu              sync.Mutex
	n               map[string]float64
}

var _ idem.Observer = (*observed)(nil)

func newMetrics(t *testing.T) (*observed, *observed) {
	o := &observed{n: map[string]float64{}}
	return o, o
}

func (o *observed) add(metric string, labels ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[metric+"|"+strings.Join(labels, ",")]++
}

// get is a count by metric name and labels, 0 when never reported.
func (o *observed) get(metric, labels string) float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[metric+"|"+labels]
}

func (o *observed) Start(string) func() { return func() {} }
func (o *observed) Processed(consumer string) {
	o.add("idem_messages_processed_total", "consumer="+consumer)
}
func (o *observed) DuplicateContext(_ context.Context, component, consumer string) {
	o.add("idem_duplicates_suppressed_total", "component="+component, "consumer="+consumer)
}
func (o *observed) FingerprintConflict(component, consumer string) {
	o.add("idem_fingerprint_conflicts_total", "component="+component, "consumer="+consumer)
}
func (o *observed) Failed(consumer, class string) {
	o.add("idem_messages_failed_total", "class="+class, "consumer="+consumer)
}
func (o *observed) Retry(consumer string) { o.add("idem_retries_total", "consumer="+consumer) }
func (o *observed) DeadLetteredContext(_ context.Context, consumer, class string) {
	o.add("idem_dead_letters_total", "class="+class, "consumer="+consumer)
}
func (o *observed) Unidentified(consumer string) {
	o.add("idem_messages_unidentified_total", "consumer="+consumer)
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

// value is a count the consumer reported to o.
func value(t *testing.T, o *observed, name, labels string) float64 {
	t.Helper()
	return o.get(name, labels)
}

// unique returns a random name suffix.
func unique() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sqlTx is database/sql's transaction type, as the sqlstore driver uses it.
type sqlTx = sql.Tx

func newInboxB[TTx any](b *testing.B, d store.Driver[TTx]) (*inbox.Inbox[TTx], error) {
	return inbox.New(d, inbox.Config{})
}
