package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// fanout is one subject on one broker with a subscription per consumer:
// every message published reaches every consumer.
type fanout struct {
	subject string
	pub     broker.Publisher
	subs    map[string]broker.Subscriber
	// window is the broker's duplicate window: a message id published
	// again inside it is dropped by the broker (JetStream).
	window time.Duration
}

// fanoutConsumers are the consumers bound to the fanout's subject.
var fanoutConsumers = []string{"a", "b", "c"}

// fanoutBrokers are the adapters the redrive-for tests run on.
var fanoutBrokers = []struct {
	name string
	open func(t *testing.T) fanout
}{
	{"memory", memFanout},
	{"jetstream-embedded", func(t *testing.T) fanout { return jsFanout(t, startNATS(t)) }},
	{"kafka-kfake", kafkaFanout},
	{"amqp", amqpFanout},
}

func memFanout(t *testing.T) fanout {
	mb := memBroker(t)
	f := fanout{subject: "orders", pub: mb.Publisher(), subs: map[string]broker.Subscriber{}}
	for _, c := range fanoutConsumers {
		sub, err := mb.Subscribe(f.subject, c)
		if err != nil {
			t.Fatal(err)
		}
		f.subs[c] = sub
	}
	return f
}

func jsFanout(t *testing.T, env *natsEnv) fanout {
	f := fanout{subject: env.subject, pub: env.pub, subs: map[string]broker.Subscriber{}, window: dupWindow}
	for _, c := range fanoutConsumers {
		f.subs[c] = env.subscriber(t, c, noIDAckWait)
	}
	return f
}

func kafkaFanout(t *testing.T) fanout {
	addrs, pub := kfakeTopic(t, "orders")
	f := fanout{subject: "orders", pub: pub, subs: map[string]broker.Subscriber{}}
	for _, c := range fanoutConsumers {
		sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: c, Topics: []string{f.subject},
			AckWait: noIDAckWait, Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		f.subs[c] = sub
	}
	return f
}

func amqpFanout(t *testing.T) fanout {
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	f := fanout{subject: "orders." + unique(), subs: map[string]broker.Subscriber{}}
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url, Exchange: "amq.topic"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	f.pub = pub
	for _, c := range fanoutConsumers {
		q := f.subject + "." + c
		if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Exchange: "amq.topic", RoutingKey: f.subject}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
		sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, AckWait: noIDAckWait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		f.subs[c] = sub
	}
	return f
}

// dupObserver counts the duplicates a consumer suppressed.
type dupObserver struct {
	idem.Observer
	dups atomic.Int64
}

func (o *dupObserver) DuplicateContext(context.Context, string, string) { o.dups.Add(1) }

// orderKey is the business key of an order message: "order:" + its order
// number.
func orderKey(m idem.Message) (string, error) {
	var o struct {
		Order int `json:"order"`
	}
	if err := json.Unmarshal(m.Payload, &o); err != nil || o.Order == 0 {
		return "", fmt.Errorf("no order number in %q", m.Payload)
	}
	return fmt.Sprintf("order:%d", o.Order), nil
}

// TestRedriveOnlyForItsConsumer: one message poisoned for three consumers
// of one subject (three letters); the operator edits and redrives a's
// letter as a revision, redrives b's as is, and the producer then sends
// the original again. Each consumer applies the order exactly once: a the
// revision (the original is recorded in a's inbox with the revision, so
// the re-send is a duplicate there, although a derives its inbox identity
// from the payload and the revision has the same business key), b the redriven original, c the
// re-send; no consumer applies another's revision or redrive.
func TestRedriveOnlyForItsConsumer(t *testing.T) {
	t.Parallel()
	for _, b := range fanoutBrokers {
		if b.name == "memory" { // on every driver, below
			continue
		}
		t.Run(b.name+"/sqlite", func(t *testing.T) { t.Parallel(); testRedriveFor(t, testdb.SQLite(t), b.open(t)) })
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRedriveFor(t, e.D, memFanout(t)) })
	})
}

func testRedriveFor[TTx any](t *testing.T, d store.Driver[TTx], f fanout) {
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE applied (consumer text NOT NULL, message_id text NOT NULL, payload text NOT NULL)`)
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var poisoned atomic.Bool
	poisoned.Store(true)
	obs := map[string]*dupObserver{}
	for _, name := range fanoutConsumers {
		_, m := newMetrics(t)
		obs[name] = &dupObserver{Observer: m}
		cfg := consumer.Config[TTx]{Name: name, DLQ: letters, FetchWait: 100 * time.Millisecond, Observer: obs[name],
			Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
				if poisoned.Load() {
					return idem.Permanent(errors.New("the order is rejected"))
				}
				_, err := d.Tx(tx).Exec(ctx, `INSERT INTO applied (consumer, message_id, payload) VALUES ($1, $2, $3)`,
					name, msg.ID, string(msg.Payload))
				return err
			}}
		if name == "a" {
			cfg.MessageID = orderKey // a dedups on the business key, so its letter is parked under it
		}
		c, err := consumer.New(newInbox(t, d), f.subs[name], cfg)
		if err != nil {
			t.Fatal(err)
		}
		start(t, c)
	}
	original := idem.Message{ID: "order-1", Subject: f.subject, Key: "order-1", Payload: []byte(`{"order":1,"seats":0}`)}
	if err := f.pub.Publish(ctx, original); err != nil {
		t.Fatal(err)
	}
	parked := map[string]dlq.Letter{}
	waitFor(t, "three letters", func() bool {
		ls, err := letters.List(ctx, dlq.Filter{State: dlq.Parked})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			parked[l.Consumer] = l
		}
		return len(parked) == 3
	})
	poisoned.Store(false)
	applied := func(consumer string) int {
		return testdb.Count(t, d, `SELECT count(*) FROM applied WHERE consumer = $1`, consumer)
	}

	_, rev, err := letters.Revise(ctx, parked["a"].ID, "op", []byte(`{"order":1,"seats":1}`), f.pub)
	if err != nil {
		t.Fatal(err)
	}
	if got := rev.Headers[broker.HeaderRedriveFor]; got != "a" {
		t.Errorf("revision %s = %q, want a", broker.HeaderRedriveFor, got)
	}
	if _, err := letters.Redrive(ctx, parked["b"].ID, "op", f.pub); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to apply the revision and b the redrive", func() bool { return applied("a") >= 1 && applied("b") >= 1 })
	// The producer sends the original again (after the broker's duplicate
	// window, or the broker would drop it).
	time.Sleep(f.window)
	if err := f.pub.Publish(ctx, original); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c to apply the re-send, a and b to suppress it", func() bool {
		return applied("c") >= 1 && obs["a"].dups.Load() >= 1 && obs["b"].dups.Load() >= 1
	})
	time.Sleep(300 * time.Millisecond) // a stray second application would show by now
	for _, want := range []struct {
		consumer, id, payload string
	}{
		{"a", rev.ID, `{"order":1,"seats":1}`},
		{"b", "order-1", `{"order":1,"seats":0}`},
		{"c", "order-1", `{"order":1,"seats":0}`},
	} {
		if n := applied(want.consumer); n != 1 {
			t.Errorf("consumer %s applied the order %d times, want once", want.consumer, n)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM applied WHERE consumer = $1 AND message_id = $2 AND payload = $3`,
			want.consumer, want.id, want.payload); n != 1 {
			t.Errorf("consumer %s: %d rows for %s %s, want 1", want.consumer, n, want.id, want.payload)
		}
	}
	// The revision and the redrive wrote no inbox row outside their own
	// consumer; a's inbox holds the original (recorded by Revise) and the
	// revision.
	for _, c := range []struct {
		consumer string
		ids      int
	}{{"a", 2}, {"b", 1}, {"c", 1}} {
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = $1`, c.consumer); n != c.ids {
			t.Errorf("inbox of %s holds %d message(s), want %d", c.consumer, n, c.ids)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = 'a' AND message_id = 'order:1'`); n != 1 {
		t.Errorf("the original (business key order:1) is not recorded in a's inbox (%d rows)", n)
	}
	if l, err := letters.Get(ctx, parked["c"].ID); err != nil || l.State != dlq.Parked {
		t.Errorf("c's letter: %v %v, want still parked", l.State, err)
	}
}
