package retrytopic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/kafka"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/retrytopic"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func TestNames(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "orders-retry-1s", 4 * time.Second: "orders-retry-4s", 16 * time.Second: "orders-retry-16s",
		time.Minute: "orders-retry-1m", 90 * time.Second: "orders-retry-1m30s", time.Hour: "orders-retry-1h",
		90 * time.Minute: "orders-retry-1h30m", 500 * time.Millisecond: "orders-retry-500ms",
	} {
		if got := retrytopic.RetryTopic("orders", d); got != want {
			t.Errorf("RetryTopic(orders, %s) = %q, want %q", d, got, want)
		}
	}
	if got := retrytopic.DLT("orders"); got != "orders-dlt" {
		t.Errorf("DLT = %q", got)
	}
	r, err := retrytopic.New(retrytopic.Config{Topic: "orders", Publisher: nopPublisher{}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Topics(), []string{"orders-retry-1s", "orders-retry-4s", "orders-retry-16s", "orders-dlt"}; !slices.Equal(got, want) {
		t.Errorf("Topics = %v, want %v", got, want)
	}
	for _, bad := range [][]time.Duration{{0}, {time.Second, time.Second}, {-time.Second}} {
		if _, err := retrytopic.New(retrytopic.Config{Topic: "orders", Publisher: nopPublisher{}, Delays: bad}); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("Delays %v: %v, want ErrInvalidOption", bad, err)
		}
	}
}

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, ...idem.Message) error { return nil }
func (nopPublisher) Close() error                                   { return nil }

// cluster is an in-process Kafka cluster (kfake) with the main topic and
// the retry topics of r created.
type cluster struct {
	addrs []string
	pub   *kafka.Publisher
}

const topic = "orders"

func newCluster(t *testing.T, delays []time.Duration) (*cluster, *retrytopic.Retrier) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	r, err := retrytopic.New(retrytopic.Config{Topic: topic, Delays: delays, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range append([]string{topic}, r.Topics()...) {
		if err := kafka.EnsureTopic(context.Background(), pub.Client(), tp, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	return &cluster{addrs: c.ListenAddrs(), pub: pub}, r
}

// subscribe joins group on topic.
func (c *cluster) subscribe(t *testing.T, group, topic string) *kafka.Subscriber {
	t.Helper()
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: c.addrs, Group: group, Topics: []string{topic},
		AckWait: 30 * time.Second, Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

func (c *cluster) publish(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		m := idem.Message{ID: id, Subject: topic, Key: "order-1", Payload: []byte(`{"id":"` + id + `"}`), Time: time.Now()}
		if err := c.pub.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// records reads every record of topic from the start (no group).
func (c *cluster) records(t *testing.T, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%s: %d records, want %d: %v", topic, len(out), n, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// event is one handler outcome, in the order observed.
type event struct {
	id, topic string
	attempt   int
	ok        bool
	at        time.Time
}

type journal struct {
	mu     sync.Mutex
	events []event
}

func (j *journal) add(e event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e.at = time.Now()
	j.events = append(j.events, e)
}

func (j *journal) snapshot() []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// done returns the index of id's success in the journal, -1 if none yet.
func done(es []event, id string) int {
	return slices.IndexFunc(es, func(e event) bool { return e.id == id && e.ok })
}

// waitFor polls until every id succeeded (a bound on the wait, not an
// assertion on time).
func (j *journal) waitFor(t *testing.T, bound time.Duration, ids ...string) []event {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		es := j.snapshot()
		if !slices.ContainsFunc(ids, func(id string) bool { return done(es, id) < 0 }) {
			return es
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s not every one of %v succeeded: %+v", bound, ids, es)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func bizTable[TTx any](t *testing.T, d store.Driver[TTx]) {
	testdb.Exec(t, d, `CREATE TABLE rt_effects (message_id text NOT NULL, attempt integer NOT NULL, topic text NOT NULL)`)
}

func effects[TTx any](t *testing.T, d store.Driver[TTx], id string) int {
	return testdb.Count(t, d, `SELECT count(*) FROM rt_effects WHERE message_id = $1`, id)
}

// handler fails the first fails[id] attempts of id transiently (and every
// attempt when fails[id] < 0; permanently for "poison"), else writes the
// effect.
func handler[TTx any](d store.Driver[TTx], j *journal, fails map[string]int) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg idem.Message) error {
		if msg.ID == "poison" {
			j.add(event{id: msg.ID, topic: msg.Subject, attempt: msg.Attempt})
			return idem.Permanent(errors.New("poison: unknown event type"))
		}
		if n := fails[msg.ID]; n < 0 || msg.Attempt <= n {
			j.add(event{id: msg.ID, topic: msg.Subject, attempt: msg.Attempt})
			return fmt.Errorf("%s: downstream 503 (attempt %d)", msg.ID, msg.Attempt)
		}
		_, err := d.Tx(tx).Exec(ctx, `INSERT INTO rt_effects (message_id, attempt, topic) VALUES ($1, $2, $3)`, msg.ID, msg.Attempt, msg.Subject)
		return err
	}
}

func run[TTx any](t *testing.T, cs ...*consumer.Consumer[TTx]) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- retrytopic.Run(ctx, cs...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// setup builds the main topic's consumer and the retry consumers of r,
// all under the consumer name "billing" (one inbox scope).
func setup[TTx any](t *testing.T, d store.Driver[TTx], c *cluster, r *retrytopic.Retrier, j *journal, fails map[string]int) []*consumer.Consumer[TTx] {
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := consumer.Config[TTx]{
		Name: "billing", FetchWait: 200 * time.Millisecond, Reroute: r,
		Handler: handler(d, j, fails),
		Hooks: consumer.Hooks{AfterCommit: func(msg idem.Message) error {
			j.add(event{id: msg.ID, topic: msg.Subject, attempt: msg.Attempt, ok: true})
			return nil
		}},
	}
	main, err := consumer.New(d, ib, c.subscribe(t, "billing", topic), cfg)
	if err != nil {
		t.Fatal(err)
	}
	retries, err := retrytopic.Consumers(d, ib, r, cfg, func(tp string, _ time.Duration) (broker.Subscriber, error) {
		return c.subscribe(t, "billing-"+strings.TrimPrefix(tp, topic+"-"), tp), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return append([]*consumer.Consumer[TTx]{main}, retries...)
}

// A record failing twice goes orders → orders-retry-1s → orders-retry-4s
// and succeeds there on attempt 3, no earlier than 1 s + 4 s after its
// first attempt, while the records behind it on orders (same key, same
// partition) complete first.
func TestNonBlockingRetries(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testNonBlocking(t, d.D) }, testdb.NoSQLPostgres)
}

func testNonBlocking[TTx any](t *testing.T, d store.Driver[TTx]) {
	bizTable(t, d)
	c, r := newCluster(t, nil) // the default delays: 1s, 4s, 16s
	j := &journal{}
	behind := []string{"after-1", "after-2", "after-3", "after-4", "after-5"}
	run(t, setup(t, d, c, r, j, map[string]int{"flaky": 2})...)
	c.publish(t, append([]string{"flaky"}, behind...)...)

	es := j.waitFor(t, time.Minute, append(behind, "flaky")...)
	ok := es[done(es, "flaky")]
	if ok.attempt != 3 || ok.topic != "orders-retry-4s" {
		t.Errorf("flaky succeeded on attempt %d via %s, want attempt 3 via orders-retry-4s", ok.attempt, ok.topic)
	}
	first := es[slices.IndexFunc(es, func(e event) bool { return e.id == "flaky" })]
	if first.attempt != 1 || first.topic != topic {
		t.Errorf("flaky's first attempt: %+v", first)
	}
	if gap := ok.at.Sub(first.at); gap < 5*time.Second {
		t.Errorf("flaky succeeded %s after its first attempt, want at least 1s + 4s", gap)
	}
	t.Logf("flaky: first attempt to success %s", ok.at.Sub(first.at).Round(time.Millisecond))
	var fails []string
	for _, e := range es {
		if e.id == "flaky" && !e.ok {
			fails = append(fails, fmt.Sprintf("%d@%s", e.attempt, e.topic))
		}
	}
	if want := []string{"1@orders", "2@orders-retry-1s"}; !slices.Equal(fails, want) {
		t.Errorf("flaky failed %v, want %v", fails, want)
	}
	for _, id := range behind {
		if done(es, id) > done(es, "flaky") {
			t.Errorf("%s completed after the retried flaky: the main topic waited", id)
		}
		if n := effects(t, d, id); n != 1 {
			t.Errorf("%s: %d effects, want 1", id, n)
		}
	}
	if n := effects(t, d, "flaky"); n != 1 {
		t.Errorf("flaky: %d effects, want 1", n)
	}

	// The record on orders-retry-4s carries where it came from and why.
	rec := c.records(t, "orders-retry-4s", 1)[0]
	want := map[string]string{
		retrytopic.HeaderOriginalTopic: "orders", retrytopic.HeaderOriginalPartition: "0",
		retrytopic.HeaderOriginalOffset: "0", retrytopic.HeaderOriginalPosition: "0/0",
		retrytopic.HeaderAttempt: "2", retrytopic.HeaderErrorClass: "transient",
		retrytopic.HeaderErrorMessage: "flaky: downstream 503 (attempt 2)",
		kafka.HeaderID:                "flaky",
	}
	for k, v := range want {
		if got := header(rec, k); got != v {
			t.Errorf("orders-retry-4s header %s = %q, want %q", k, got, v)
		}
	}
	if string(rec.Key) != "order-1" {
		t.Errorf("key %q, want order-1", rec.Key)
	}
	due, err := time.Parse(time.RFC3339Nano, header(rec, retrytopic.HeaderNotBefore))
	if err != nil || due.Before(first.at.Add(5*time.Second)) {
		t.Errorf("%s = %v (%v), want at least 5s after the first attempt %v", retrytopic.HeaderNotBefore, due, err, first.at)
	}
}

// Out of retry topics, a record goes to orders-dlt with its original
// coordinates; a permanent failure goes there at once; a copy of a message
// that already succeeded is suppressed by the inbox on a retry topic.
func TestDeadLetterTopicAndDedup(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testDLT(t, d.D) }, testdb.NoSQLPostgres)
}

func testDLT[TTx any](t *testing.T, d store.Driver[TTx]) {
	bizTable(t, d)
	c, r := newCluster(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond})
	if got := r.RetryTopics(); !slices.Equal(got, []string{"orders-retry-50ms", "orders-retry-100ms"}) {
		t.Fatalf("retry topics %v", got)
	}
	j := &journal{}
	run(t, setup(t, d, c, r, j, map[string]int{"always": -1})...)
	c.publish(t, "always", "poison", "ok-1")
	j.waitFor(t, time.Minute, "ok-1")

	dlt := c.records(t, "orders-dlt", 2)
	byID := map[string]*kgo.Record{}
	for _, rec := range dlt {
		byID[header(rec, kafka.HeaderID)] = rec
	}
	for id, want := range map[string]map[string]string{
		"always": {retrytopic.HeaderOriginalTopic: "orders", retrytopic.HeaderOriginalOffset: "0", retrytopic.HeaderAttempt: "3",
			retrytopic.HeaderErrorClass: "transient", retrytopic.HeaderErrorMessage: "always: downstream 503 (attempt 3)"},
		"poison": {retrytopic.HeaderOriginalTopic: "orders", retrytopic.HeaderOriginalOffset: "1", retrytopic.HeaderAttempt: "1",
			retrytopic.HeaderErrorClass: "permanent", retrytopic.HeaderErrorMessage: "permanent: poison: unknown event type"},
	} {
		rec := byID[id]
		if rec == nil {
			t.Errorf("%s not in orders-dlt (%d records)", id, len(dlt))
			continue
		}
		for k, v := range want {
			if got := header(rec, k); got != v {
				t.Errorf("%s: orders-dlt header %s = %q, want %q", id, k, got, v)
			}
		}
		if header(rec, retrytopic.HeaderNotBefore) != "" {
			t.Errorf("%s: a dead letter has no due time, got %q", id, header(rec, retrytopic.HeaderNotBefore))
		}
	}
	var attempts []string
	for _, e := range j.snapshot() {
		if e.id == "always" {
			attempts = append(attempts, fmt.Sprintf("%d@%s", e.attempt, e.topic))
		}
		if e.id == "poison" && e.topic != topic {
			t.Errorf("poison was retried: %+v", e)
		}
	}
	if want := []string{"1@orders", "2@orders-retry-50ms", "3@orders-retry-100ms"}; !slices.Equal(attempts, want) {
		t.Errorf("always ran %v, want %v", attempts, want)
	}

	// A second copy of ok-1 on a retry topic (a crash between the retry
	// publish and the ack republishes) is suppressed; the sentinel behind
	// it shows it was consumed.
	copyOf := idem.Message{ID: "ok-1", Subject: "orders-retry-50ms", Key: "order-1", Payload: []byte(`{"id":"ok-1"}`),
		Headers: map[string]string{retrytopic.HeaderAttempt: "1"}}
	sentinel := idem.Message{ID: "sentinel", Subject: "orders-retry-50ms", Key: "order-1", Payload: []byte(`{}`)}
	if err := c.pub.Publish(context.Background(), copyOf, sentinel); err != nil {
		t.Fatal(err)
	}
	j.waitFor(t, time.Minute, "sentinel")
	if n := effects(t, d, "ok-1"); n != 1 {
		t.Errorf("ok-1: %d effects after a retried copy, want 1", n)
	}
	for _, e := range j.snapshot() {
		if e.id == "ok-1" && e.topic != topic {
			t.Errorf("ok-1's copy ran the handler: %+v", e)
		}
	}
}

// Blocking retries: the failed record is retried in place with the
// partition paused, and the records behind it complete only after it.
func TestBlockingRetries(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBlocking(t, d.D) }, testdb.NoSQLPostgres)
}

func testBlocking[TTx any](t *testing.T, d store.Driver[TTx]) {
	bizTable(t, d)
	c, _ := newCluster(t, nil)
	sub := c.subscribe(t, "billing", topic)
	j := &journal{}
	var (
		mu     sync.Mutex
		paused []bool // per retried attempt of flaky: was the subscription paused
	)
	h := handler(d, j, map[string]int{"flaky": 2})
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(d, ib, sub, consumer.Config[TTx]{
		Name: "billing", FetchWait: 200 * time.Millisecond, RetryInPlace: true, MaxAttempts: 5,
		Backoff: consumer.Backoff{Base: 300 * time.Millisecond, Max: time.Second},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			if msg.ID == "flaky" && msg.Attempt > 1 {
				mu.Lock()
				paused = append(paused, sub.Paused())
				mu.Unlock()
			}
			return h(ctx, tx, msg)
		},
		Hooks: consumer.Hooks{AfterCommit: func(msg idem.Message) error {
			j.add(event{id: msg.ID, topic: msg.Subject, attempt: msg.Attempt, ok: true})
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, cons)
	behind := []string{"after-1", "after-2", "after-3"}
	c.publish(t, append([]string{"flaky"}, behind...)...)
	es := j.waitFor(t, time.Minute, append(behind, "flaky")...)
	ok := es[done(es, "flaky")]
	if ok.attempt != 3 || ok.topic != topic {
		t.Errorf("flaky succeeded on attempt %d via %s, want attempt 3 in place on orders", ok.attempt, ok.topic)
	}
	for _, id := range behind {
		if done(es, id) < done(es, "flaky") {
			t.Errorf("%s completed before the retried flaky: blocking retries let it pass", id)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(paused, []bool{true, true}) {
		t.Errorf("subscription paused during flaky's retries: %v, want [true true]", paused)
	}
	if sub.Paused() {
		t.Errorf("subscription still paused after the retries")
	}
	for _, id := range append(behind, "flaky") {
		if n := effects(t, d, id); n != 1 {
			t.Errorf("%s: %d effects, want 1", id, n)
		}
	}
}

func TestBlockingNeedsOneWorker(t *testing.T) {
	d := testdb.SQLite(t)
	ib, _ := inbox.New(d, inbox.Config{})
	_, err := consumer.New(d, ib, nopSub{}, consumer.Config[*sql.Tx]{Name: "x", RetryInPlace: true, Concurrency: 2,
		Handler: func(context.Context, *sql.Tx, idem.Message) error { return nil }})
	if !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("RetryInPlace with Concurrency 2: %v, want ErrInvalidOption", err)
	}
}

type nopSub struct{}

func (nopSub) Fetch(context.Context, int, time.Duration) ([]broker.Delivery, error) { return nil, nil }
func (nopSub) Close() error                                                         { return nil }
