package retrytopic_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	js "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/broker/idemkafka"
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

// rig is a broker carrying the main topic, its retry topics and its
// dead-letter topic: Kafka (kfake, in-process), JetStream (embedded, and a
// real nats-server when IDEM_TEST_NATS_URL is set), RabbitMQ (when
// IDEM_TEST_AMQP_URL is set).
type rig struct {
	topic     string
	pub       broker.Publisher
	subscribe func(t *testing.T, group, topic string) broker.Subscriber
	// records returns the first n records of topic: headers (with the
	// message id under "id") and key.
	records func(t *testing.T, topic string, n int) []record
	// position is the source position of the main topic's i-th record
	// (0-based); Kafka also has partition and offset headers.
	position func(i int) string
	kafka    bool
}

type record struct {
	headers map[string]string
	key     string
}

// brokers are the brokers the tests run on: Kafka (kfake), JetStream
// (embedded), a real nats-server (skipped without IDEM_TEST_NATS_URL) and
// RabbitMQ (skipped without IDEM_TEST_AMQP_URL).
var brokers = []struct {
	name string
	rig  func(t *testing.T, delays []time.Duration) (*rig, *retrytopic.Retrier)
}{
	{"kafka-kfake", kafkaRig},
	{"jetstream-embedded", func(t *testing.T, delays []time.Duration) (*rig, *retrytopic.Retrier) {
		srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		return jetstreamRig(t, srv.ClientURL(), delays)
	}},
	{"nats-server", func(t *testing.T, delays []time.Duration) (*rig, *retrytopic.Retrier) {
		url := os.Getenv("IDEM_TEST_NATS_URL")
		if url == "" {
			t.Skip("IDEM_TEST_NATS_URL not set; export IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 to run against a real nats-server")
		}
		return jetstreamRig(t, url, delays)
	}},
	{"rabbitmq", amqpRig},
}

// eachDriverAndBroker runs body on every broker, each on SQLite and
// PostgreSQL (pgx): every run has its own broker and its own store.
func eachDriverAndBroker(t *testing.T, delays []time.Duration, body func(t *testing.T, d store.Driver[any], rg *rig, r *retrytopic.Retrier)) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
				rg, r := b.rig(t, delays)
				body(t, d.D, rg, r)
			}, testdb.NoSQLPostgres)
		})
	}
}

func kafkaRig(t *testing.T, delays []time.Duration) (*rig, *retrytopic.Retrier) {
	t.Helper()
	const topic = "orders"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	r, err := retrytopic.New(retrytopic.Config{Topic: topic, Delays: delays, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range append([]string{topic}, r.Topics()...) {
		if err := idemkafka.EnsureTopic(context.Background(), pub.Client(), tp, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	return &rig{
		topic: topic, pub: pub, kafka: true,
		subscribe: func(t *testing.T, group, topic string) broker.Subscriber {
			sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: group, Topics: []string{topic},
				AckWait: 30 * time.Second, Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sub.Close() })
			return sub
		},
		records: func(t *testing.T, topic string, n int) []record {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			return collect(t, topic, n, func() []record {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				var out []record
				for _, kr := range cl.PollFetches(ctx).Records() {
					rec := record{headers: map[string]string{}, key: string(kr.Key)}
					for _, h := range kr.Headers {
						rec.headers[h.Key] = string(h.Value)
					}
					rec.headers["id"] = rec.headers[idemkafka.HeaderID]
					out = append(out, rec)
				}
				return out
			})
		},
		position: func(i int) string { return fmt.Sprintf("0/%d", i) },
	}, r
}

func jetstreamRig(t *testing.T, url string, delays []time.Duration) (*rig, *retrytopic.Retrier) {
	t.Helper()
	nc, j, err := idemjetstream.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	tp := "idemtest-" + id + "-orders" // unique on a shared server
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := retrytopic.New(retrytopic.Config{Topic: tp, Delays: delays, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	stream := "IDEMTEST_RT_" + strings.ToUpper(id)
	ctx := context.Background()
	if _, err := idemjetstream.EnsureStream(ctx, j, js.StreamConfig{Name: stream, Subjects: append([]string{tp}, r.Topics()...)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.DeleteStream(context.Background(), stream) })
	return &rig{
		topic: tp, pub: pub,
		subscribe: func(t *testing.T, group, topic string) broker.Subscriber {
			sub, err := idemjetstream.NewSubscriber(ctx, j, idemjetstream.SubscriberConfig{Stream: stream, Durable: group,
				FilterSubjects: []string{topic}, AckWait: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sub.Close() })
			return sub
		},
		records: func(t *testing.T, topic string, n int) []record {
			oc, err := j.OrderedConsumer(ctx, stream, js.OrderedConsumerConfig{FilterSubjects: []string{topic}})
			if err != nil {
				t.Fatal(err)
			}
			return collect(t, topic, n, func() []record {
				batch, err := oc.Fetch(n, js.FetchMaxWait(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var out []record
				for m := range batch.Messages() {
					rec := record{headers: map[string]string{}, key: m.Headers().Get(idemjetstream.HeaderKey)}
					for k, v := range m.Headers() {
						rec.headers[k] = v[0]
					}
					rec.headers["id"] = cmp.Or(rec.headers[idemjetstream.HeaderIdemID], rec.headers[idemjetstream.HeaderMsgID])
					out = append(out, rec)
				}
				return out
			})
		},
		position: func(i int) string { return fmt.Sprint(i + 1) }, // the stream sequence
	}, r
}

// amqpRig publishes to amq.topic with the topic as routing key; a
// subscription is a queue bound to it, and each topic has a tap queue the
// test reads the published records from.
func amqpRig(t *testing.T, delays []time.Duration) (*rig, *retrytopic.Retrier) {
	t.Helper()
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tp := "idemtest-" + hex.EncodeToString(b) + "-orders" // unique on a shared server
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url, Exchange: "amq.topic"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	r, err := retrytopic.New(retrytopic.Config{Topic: tp, Delays: delays, Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	declare := func(t *testing.T, q, key string) {
		if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Exchange: "amq.topic", RoutingKey: key}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
	}
	for _, topic := range append([]string{tp}, r.Topics()...) {
		declare(t, topic+".tap", topic)
	}
	return &rig{
		topic: tp, pub: pub,
		subscribe: func(t *testing.T, group, topic string) broker.Subscriber {
			q := topic + "." + group
			declare(t, q, topic)
			sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, AckWait: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sub.Close() })
			return sub
		},
		records: func(t *testing.T, topic string, n int) []record {
			conn, err := amqp091.Dial(url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			return collect(t, topic, n, func() []record {
				d, ok, err := ch.Get(topic+".tap", true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					time.Sleep(20 * time.Millisecond)
					return nil
				}
				rec := record{headers: map[string]string{"id": d.MessageId}}
				for k, v := range d.Headers {
					rec.headers[k] = fmt.Sprint(v)
				}
				rec.key = rec.headers[idemamqp.HeaderKey]
				return []record{rec}
			})
		},
		position: func(i int) string { return fmt.Sprint(i + 1) }, // the delivery tag on the consumer's channel
	}, r
}

// collect calls next until it returned n records in all (waiting at most
// 20s).
func collect(t *testing.T, topic string, n int, next func() []record) []record {
	t.Helper()
	var out []record
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d records, want %d", topic, len(out), n)
		}
		out = append(out, next()...)
	}
	return out
}

func (rg *rig) publish(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		m := idem.Message{ID: id, Subject: rg.topic, Key: "order-1", Payload: []byte(`{"id":"` + id + `"}`), Time: time.Now()}
		if err := rg.pub.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
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
func setup[TTx any](t *testing.T, d store.Driver[TTx], rg *rig, r *retrytopic.Retrier, j *journal, fails map[string]int) []*consumer.Consumer[TTx] {
	return setupHandler(t, d, rg, r, j, handler(d, j, fails))
}

// setupHandler is setup with the handler h; Consumers adds the consumer of
// the dead-letter topic.
func setupHandler[TTx any](t *testing.T, d store.Driver[TTx], rg *rig, r *retrytopic.Retrier, j *journal, h inbox.Handler[TTx]) []*consumer.Consumer[TTx] {
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := consumer.Config[TTx]{
		Name: "billing", FetchWait: 200 * time.Millisecond, Reroute: r,
		Handler: h,
		Hooks: consumer.Hooks{AfterCommit: func(msg idem.Message) error {
			j.add(event{id: msg.ID, topic: msg.Subject, attempt: msg.Attempt, ok: true})
			return nil
		}},
	}
	main, err := consumer.New(ib, rg.subscribe(t, "billing", rg.topic), cfg)
	if err != nil {
		t.Fatal(err)
	}
	retries, err := retrytopic.Consumers(ib, r, cfg, func(tp string, delay time.Duration) (broker.Subscriber, error) {
		if tp == r.DLT() {
			return rg.subscribe(t, "billing-dlt", tp), nil
		}
		return rg.subscribe(t, retrytopic.RetryTopic("billing", delay), tp), nil
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
	eachDriverAndBroker(t, nil, testNonBlocking) // the default delays: 1s, 4s, 16s
}

func testNonBlocking(t *testing.T, d store.Driver[any], rg *rig, r *retrytopic.Retrier) {
	bizTable(t, d)
	j := &journal{}
	behind := []string{"after-1", "after-2", "after-3", "after-4", "after-5"}
	run(t, setup(t, d, rg, r, j, map[string]int{"flaky": 2})...)
	rg.publish(t, append([]string{"flaky"}, behind...)...)

	es := j.waitFor(t, time.Minute, append(behind, "flaky")...)
	retry1s, retry4s := r.RetryTopics()[0], r.RetryTopics()[1]
	ok := es[done(es, "flaky")]
	if ok.attempt != 3 || ok.topic != retry4s {
		t.Errorf("flaky succeeded on attempt %d via %s, want attempt 3 via %s", ok.attempt, ok.topic, retry4s)
	}
	first := es[slices.IndexFunc(es, func(e event) bool { return e.id == "flaky" })]
	if first.attempt != 1 || first.topic != rg.topic {
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
	if want := []string{"1@" + rg.topic, "2@" + retry1s}; !slices.Equal(fails, want) {
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

	// The record on the -retry-4s topic carries where it came from and why.
	rec := rg.records(t, retry4s, 1)[0]
	want := map[string]string{
		"idem-original-topic": rg.topic, "idem-original-position": rg.position(0),
		"idem-attempt": "2", "idem-error-class": "transient",
		"idem-error-message": "flaky: downstream 503 (attempt 2)",
		"id":                 "flaky",
	}
	if rg.kafka {
		want["idem-original-partition"], want["idem-original-offset"] = "0", "0"
	}
	for k, v := range want {
		if got := rec.headers[k]; got != v {
			t.Errorf("%s header %s = %q, want %q", retry4s, k, got, v)
		}
	}
	if rec.key != "order-1" {
		t.Errorf("key %q, want order-1", rec.key)
	}
	due, err := time.Parse(time.RFC3339Nano, rec.headers["idem-retry-not-before"])
	if err != nil || due.Before(first.at.Add(5*time.Second)) {
		t.Errorf("%s = %v (%v), want at least 5s after the first attempt %v", "idem-retry-not-before", due, err, first.at)
	}
}

// Out of retry topics, a record goes to the -dlt topic with its original
// coordinates; a permanent failure goes there at once; a copy of a message
// that already succeeded is suppressed by the inbox on a retry topic.
func TestDeadLetterTopicAndDedup(t *testing.T) {
	t.Parallel()
	eachDriverAndBroker(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, testDLT)
}

func testDLT(t *testing.T, d store.Driver[any], rg *rig, r *retrytopic.Retrier) {
	bizTable(t, d)
	if got := r.RetryTopics(); !slices.Equal(got, []string{rg.topic + "-retry-50ms", rg.topic + "-retry-100ms"}) {
		t.Fatalf("retry topics %v", got)
	}
	j := &journal{}
	cs := setup(t, d, rg, r, j, map[string]int{"always": -1})
	// Published before the consumers run, so that the main topic's records
	// have the first positions (a JetStream stream numbers every subject).
	rg.publish(t, "always", "poison", "ok-1")
	run(t, cs...)
	j.waitFor(t, time.Minute, "ok-1")

	dlt := rg.records(t, rg.topic+"-dlt", 2)
	byID := map[string]record{}
	for _, rec := range dlt {
		byID[rec.headers["id"]] = rec
	}
	for id, want := range map[string]map[string]string{
		"always": {"idem-original-topic": rg.topic, "idem-original-position": rg.position(0), "idem-attempt": "3",
			"idem-error-class": "transient", "idem-error-message": "always: downstream 503 (attempt 3)"},
		"poison": {"idem-original-topic": rg.topic, "idem-original-position": rg.position(1), "idem-attempt": "1",
			"idem-error-class": "permanent", "idem-error-message": "permanent: poison: unknown event type"},
	} {
		rec, ok := byID[id]
		if !ok {
			t.Errorf("%s not in the dead-letter topic (%d records)", id, len(dlt))
			continue
		}
		for k, v := range want {
			if got := rec.headers[k]; got != v {
				t.Errorf("%s: dead-letter header %s = %q, want %q", id, k, got, v)
			}
		}
		if nb := rec.headers["idem-retry-not-before"]; nb != "" {
			t.Errorf("%s: a dead letter has no due time, got %q", id, nb)
		}
	}
	var attempts []string
	for _, e := range j.snapshot() {
		if e.id == "always" {
			attempts = append(attempts, fmt.Sprintf("%d@%s", e.attempt, e.topic))
		}
		if e.id == "poison" && e.topic != rg.topic {
			t.Errorf("poison was retried: %+v", e)
		}
	}
	if want := []string{"1@" + rg.topic, "2@" + r.RetryTopics()[0], "3@" + r.RetryTopics()[1]}; !slices.Equal(attempts, want) {
		t.Errorf("always ran %v, want %v", attempts, want)
	}

	// A second copy of ok-1 on a retry topic (a crash between the retry
	// publish and the ack republishes) is suppressed; the sentinel behind
	// it shows it was consumed.
	stage := r.RetryTopics()[0]
	copyOf := idem.Message{ID: "ok-1", Subject: stage, Key: "order-1", Payload: []byte(`{"id":"ok-1"}`),
		Headers: map[string]string{"idem-attempt": "1", broker.HeaderRedrive: "copy"}}
	sentinel := idem.Message{ID: "sentinel", Subject: stage, Key: "order-1", Payload: []byte(`{}`)}
	if err := rg.pub.Publish(context.Background(), copyOf, sentinel); err != nil {
		t.Fatal(err)
	}
	j.waitFor(t, time.Minute, "sentinel")
	if n := effects(t, d, "ok-1"); n != 1 {
		t.Errorf("ok-1: %d effects after a retried copy, want 1", n)
	}
	for _, e := range j.snapshot() {
		if e.id == "ok-1" && e.topic != rg.topic {
			t.Errorf("ok-1's copy ran the handler: %+v", e)
		}
	}
}

// Blocking retries: the failed record is retried in place with the
// subscription paused, and the records behind it complete only after it.
func TestBlockingRetries(t *testing.T) {
	t.Parallel()
	eachDriverAndBroker(t, nil, testBlocking)
}

func testBlocking(t *testing.T, d store.Driver[any], rg *rig, _ *retrytopic.Retrier) {
	bizTable(t, d)
	sub := rg.subscribe(t, "billing", rg.topic)
	pausable, ok := sub.(interface{ Paused() bool })
	if !ok {
		t.Fatalf("%T reports no Paused", sub)
	}
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
	cons, err := consumer.New(ib, sub, consumer.Config[any]{
		Name: "billing", FetchWait: 200 * time.Millisecond, RetryInPlace: true, MaxAttempts: 5,
		Backoff: consumer.Backoff{Base: 300 * time.Millisecond, Max: time.Second},
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			if msg.ID == "flaky" && msg.Attempt > 1 {
				mu.Lock()
				paused = append(paused, pausable.Paused())
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
	rg.publish(t, append([]string{"flaky"}, behind...)...)
	es := j.waitFor(t, time.Minute, append(behind, "flaky")...)
	done3 := es[done(es, "flaky")]
	if done3.attempt != 3 || done3.topic != rg.topic {
		t.Errorf("flaky succeeded on attempt %d via %s, want attempt 3 in place on %s", done3.attempt, done3.topic, rg.topic)
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
	if pausable.Paused() {
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
	_, err := consumer.New(ib, nopSub{}, consumer.Config[*sql.Tx]{Name: "x", RetryInPlace: true, Concurrency: 2,
		Handler: func(context.Context, *sql.Tx, idem.Message) error { return nil }})
	if !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("RetryInPlace with Concurrency 2: %v, want ErrInvalidOption", err)
	}
}

type nopSub struct{}

func (nopSub) Fetch(context.Context, int, time.Duration) ([]broker.Delivery, error) { return nil, nil }
func (nopSub) Close() error                                                         { return nil }
