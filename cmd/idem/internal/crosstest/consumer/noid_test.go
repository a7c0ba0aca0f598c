package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// noIDAckWait is the ack wait of the subscriptions of the no-id tests: a
// message left unsettled would be redelivered after it. It is long enough
// for a loaded machine to settle a delivery well within it.
const noIDAckWait = 2 * time.Second

// noIDBroker is one broker under the no-id tests: sub is the consumer's
// subscription; publishRaw publishes payload the way a producer that knows
// nothing of idem does (no message id at all); publishOK publishes an
// ordinary message with id; position is where the broker stored the nth
// (1-based) message of the test's subject.
type noIDBroker struct {
	subject    string
	sub        broker.Subscriber
	publishRaw func(t *testing.T, payload string)
	publishOK  func(t *testing.T, id, payload string)
	pub        broker.Publisher // for the redrive
	position   func(n int) string
	// settled, if set, checks the broker's own view once everything is
	// settled: nothing pending, nothing redelivered.
	settled func(t *testing.T)
}

// noIDBrokers are the adapters the consumer runtime sits on, each able
// to deliver a message without an id (the memory broker through a
// stripping wrapper, see memNoID).
var noIDBrokers = []struct {
	name string
	open func(t *testing.T) noIDBroker
}{
	{"memory", func(t *testing.T) noIDBroker { return memNoID(t, "orders") }},
	{"jetstream-embedded", func(t *testing.T) noIDBroker { return jsNoID(t, startNATS(t)) }},
	{"jetstream-server", func(t *testing.T) noIDBroker { return jsNoID(t, serverNATS(t)) }},
	{"kafka-kfake", kafkaNoID},
	{"amqp", amqpNoID},
}

// TestMessageWithoutID: a message delivered without a message id (what a
// plain JetStream publish sends: no Nats-Msg-Id) is dead-lettered at once
// under the broker's coordinates with a reason naming Config.MessageID,
// counted, logged at ERROR through the configured logger and terminated:
// the handler never runs, it is not redelivered, and the next ordinary
// message is processed.
func TestMessageWithoutID(t *testing.T) {
	t.Parallel()
	for _, b := range noIDBrokers {
		t.Run(b.name+"/sqlite", func(t *testing.T) { t.Parallel(); testNoID(t, testdb.SQLite(t), b.open(t), 1) })
		t.Run(b.name+"/pgx/batch4", func(t *testing.T) { t.Parallel(); testNoID(t, testdb.Pgx(t), b.open(t), 4) })
	}
	t.Run("jetstream-embedded/sql-postgres", func(t *testing.T) {
		t.Parallel()
		testNoID(t, testdb.SQLPostgres(t), jsNoID(t, startNATS(t)), 1)
	})
	// A subject too long to appear in a message id still gets a valid one.
	t.Run("memory/long-subject", func(t *testing.T) {
		t.Parallel()
		testNoID(t, testdb.SQLite(t), memNoID(t, "orders."+strings.Repeat("x", 300)), 1)
	})
}

func testNoID[TTx any](t *testing.T, d store.Driver[TTx], b noIDBroker, batch int) {
	ctx := context.Background()
	bizTable(t, d)
	reg, m := newMetrics(t)
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The log goes to a file (the text handler serialises its writes) read
	// at the end.
	logFile, err := os.Create(filepath.Join(t.TempDir(), "consumer.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	var runs, rawRuns atomic.Int64
	sub := &countDeliveries{Subscriber: b.sub}
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", BatchSize: batch, FetchWait: 50 * time.Millisecond, Observer: m, DLQ: letters,
		Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			runs.Add(1)
			if strings.HasPrefix(string(msg.Payload), "raw") {
				rawRuns.Add(1)
			}
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	b.publishRaw(t, "raw order 1")
	b.publishOK(t, "ok-1", `{"order":"1"}`)

	waitFor(t, "the id-less message dead-lettered and ok-1 processed", func() bool {
		n, _ := letters.CountParked(ctx)
		return n["billing"] == 1 && effects(t, d, "ok-1") == 1
	})
	// Longer than the ack wait (and than the old code's first retry delay,
	// at most Backoff.Base = 1s), so a message left unsettled or Nak'ed
	// would have come back by now.
	time.Sleep(noIDAckWait + time.Second)

	ls, err := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("letters = %+v, %v; want exactly one", ls, err)
	}
	l := ls[0]
	if err := checks.ID(l.MessageID); err != nil || !strings.HasPrefix(l.MessageID, "no-id:") {
		t.Errorf("letter message id %q (%v), want a valid synthesized no-id:… id", l.MessageID, err)
	}
	if want := "no-id:" + b.subject + "@" + b.position(1); len(want) <= idem.MaxKeyLen && l.MessageID != want {
		t.Errorf("letter message id %q, want the broker coordinates %q", l.MessageID, want)
	}
	if l.State != dlq.Parked || l.Source != b.subject || l.Position != b.position(1) ||
		string(l.Payload) != "raw order 1" || l.ErrorClass != "invalid_input" || l.Attempts != 1 {
		t.Errorf("letter lacks context: %+v", l)
	}
	if !strings.Contains(l.Error, "consumer.Config.MessageID") || !strings.Contains(l.Error, "no usable id") {
		t.Errorf("letter error %q does not say how to configure consumer.Config.MessageID", l.Error)
	}
	if n := rawRuns.Load(); n != 0 {
		t.Errorf("the handler ran %d times for the id-less message", n)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler runs = %d, want 1 (ok-1)", n)
	}
	if n := effects(t, d, ""); n != 1 {
		t.Errorf("effects = %d, want 1 (ok-1)", n)
	}
	for name, want := range map[string]float64{
		"idem_messages_unidentified_total|consumer=billing":            1,
		"idem_dead_letters_total|class=invalid_input,consumer=billing": 1,
		"idem_messages_processed_total|consumer=billing":               1,
	} {
		metric, labels, _ := strings.Cut(name, "|")
		if got := value(t, reg, metric, labels); got != want {
			t.Errorf("%s{%s} = %v, want %v", metric, labels, got, want)
		}
	}
	if got := value(t, reg, "idem_retries_total", "consumer=billing"); got > 0 {
		t.Errorf("idem_retries_total = %v: the id-less message was sent back for redelivery", got)
	}
	logged, err := os.ReadFile(logFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	if out := string(logged); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "consumer.Config.MessageID") ||
		!strings.Contains(out, l.MessageID) {
		t.Errorf("configured logger got no ERROR line naming the letter and consumer.Config.MessageID:\n%s", out)
	}
	if n := sub.raw.Load(); n != 1 {
		t.Errorf("the id-less message was delivered %d times, want once", n)
	}
	if b.settled != nil {
		b.settled(t)
	}

	// `idem stats` shows it among the parked letters, and as one without
	// a message id.
	st, err := idemmetrics.Snapshot(ctx, d, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadParked.By["billing"] != 1 || st.DeadNoID.By["billing"] != 1 {
		t.Errorf("stats: parked %v, without a message id %v; want billing: 1 in both", st.DeadParked.By, st.DeadNoID.By)
	}

	// The operator's way out: a redrive republishes the message under the
	// synthesized id, and it is processed once.
	if _, err := letters.Redrive(ctx, l.ID, "alice", b.pub); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	waitFor(t, "the redriven message processed under "+l.MessageID, func() bool { return effects(t, d, l.MessageID) == 1 })
	if n := rawRuns.Load(); n != 1 {
		t.Errorf("handler runs for the redriven message = %d, want 1", n)
	}
}

// countDeliveries counts the deliveries of the "raw…" payloads of a
// subscriber.
type countDeliveries struct {
	broker.Subscriber
	raw atomic.Int64
}

func (s *countDeliveries) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	ds, err := s.Subscriber.Fetch(ctx, max, maxWait)
	for _, dv := range ds {
		if strings.HasPrefix(string(dv.Message().Payload), "raw") {
			s.raw.Add(1)
		}
	}
	return ds, err
}

// memNoID is the memory broker with a subscription that hands out the
// messages whose id starts with "raw-" without any id, as an adapter would
// deliver a message its producer published without one (the memory
// broker itself refuses to publish a message without a valid id).
func memNoID(t *testing.T, subject string) noIDBroker {
	mb := memBroker(t)
	sub, err := mb.Subscribe(subject, "billing")
	if err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	return noIDBroker{
		subject: subject,
		sub:     stripIDs{sub},
		publishRaw: func(t *testing.T, payload string) {
			if err := mb.Publisher().Publish(context.Background(), idem.Message{ID: fmt.Sprintf("raw-%d", seq.Add(1)),
				Subject: subject, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		},
		publishOK: func(t *testing.T, id, payload string) {
			if err := mb.Publisher().Publish(context.Background(), idem.Message{ID: id, Subject: subject, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		},
		pub:      mb.Publisher(),
		position: func(n int) string { return fmt.Sprint(n) },
		settled: func(t *testing.T) {
			st := mb.Stats()
			if st.Termed != 1 || st.Acked < 1 || st.Naked != 0 {
				t.Errorf("broker stats %+v, want 1 term, ok-1 acked, no nak", st)
			}
			if n := mb.Pending(subject, "billing"); n != 0 {
				t.Errorf("pending = %d, want 0", n)
			}
		},
	}
}

// stripIDs removes the id of "raw-…" messages from the deliveries of a
// subscriber.
type stripIDs struct{ broker.Subscriber }

func (s stripIDs) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	ds, err := s.Subscriber.Fetch(ctx, max, maxWait)
	for i, dv := range ds {
		if strings.HasPrefix(dv.Message().ID, "raw-") {
			ds[i] = noIDDelivery{dv}
		}
	}
	return ds, err
}

type noIDDelivery struct{ broker.Delivery }

func (d noIDDelivery) Message() idem.Message {
	m := d.Delivery.Message()
	m.ID = ""
	return m
}

// jsNoID is a JetStream stream whose id-less messages are published with a
// plain nats.go JetStream publish: no Nats-Msg-Id header, no idem header.
func jsNoID(t *testing.T, env *natsEnv) noIDBroker {
	sub := env.subscriber(t, "billing", noIDAckWait)
	return noIDBroker{
		subject: env.subject,
		sub:     sub,
		publishRaw: func(t *testing.T, payload string) {
			if _, err := env.js.Publish(context.Background(), env.subject, []byte(payload)); err != nil {
				t.Fatal(err)
			}
		},
		publishOK: func(t *testing.T, id, payload string) {
			if err := env.pub.Publish(context.Background(), idem.Message{ID: id, Subject: env.subject, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		},
		pub:      env.pub,
		position: func(n int) string { return fmt.Sprint(n) },
		settled: func(t *testing.T) {
			cons, err := env.js.Consumer(context.Background(), env.stream, "billing")
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
				t.Errorf("JetStream consumer: ack pending %d, pending %d, redelivered %d; want nothing outstanding",
					info.NumAckPending, info.NumPending, info.NumRedelivered)
			}
		},
	}
}

// kafkaNoID is a topic of one partition on an in-process fake Kafka
// cluster; id-less records are produced with a plain franz-go client: no
// idem-id header, and a key that is not UTF-8.
func kafkaNoID(t *testing.T) noIDBroker {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	addrs := cluster.ListenAddrs()
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	const topic = "orders"
	if err := idemkafka.EnsureTopic(context.Background(), pub.Client(), topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: "billing", Topics: []string{topic},
		AckWait: noIDAckWait, Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return noIDBroker{
		subject: topic,
		sub:     sub,
		publishRaw: func(t *testing.T, payload string) {
			// A record key is any bytes: this one is not UTF-8, which no
			// PostgreSQL text column accepts, and must not keep the letter
			// from being stored.
			rec := &kgo.Record{Topic: topic, Key: []byte("\xffkey"), Value: []byte(payload)}
			if err := pub.Client().ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		},
		publishOK: func(t *testing.T, id, payload string) {
			if err := pub.Publish(context.Background(), idem.Message{ID: id, Subject: topic, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		},
		pub:      pub,
		position: func(n int) string { return fmt.Sprintf("0/%d", n-1) },
	}
}

// amqpNoID is a queue on the RabbitMQ at IDEM_TEST_AMQP_URL (skips when
// unset) bound to amq.topic; id-less messages are published with a plain
// amqp091 publish: no message-id.
func amqpNoID(t *testing.T) noIDBroker {
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	subject := "orders." + unique()
	if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: subject, Exchange: "amq.topic", RoutingKey: subject}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, subject) })
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url, Exchange: "amq.topic"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: subject, AckWait: noIDAckWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return noIDBroker{
		subject: subject,
		sub:     sub,
		publishRaw: func(t *testing.T, payload string) {
			conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.topic", subject, true, false,
				amqp091.Publishing{Body: []byte(payload)})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := conf.WaitContext(context.Background()); !ok || err != nil {
				t.Fatalf("raw publish not confirmed: %v", err)
			}
		},
		publishOK: func(t *testing.T, id, payload string) {
			if err := pub.Publish(context.Background(), idem.Message{ID: id, Subject: subject, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		},
		pub: pub,
		// The delivery tag of the subscriber's channel: the first delivery
		// is 1.
		position: func(n int) string { return fmt.Sprint(n) },
	}
}

// serverNATS is a fresh stream on the real nats-server at
// IDEM_TEST_NATS_URL (skips when unset), deleted when the test ends.
func serverNATS(t *testing.T) *natsEnv {
	t.Helper()
	url := os.Getenv("IDEM_TEST_NATS_URL")
	if url == "" {
		t.Skip("IDEM_TEST_NATS_URL not set; export IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 to run against a real nats-server")
	}
	env := natsEnvAt(t, url)
	t.Cleanup(func() { _ = env.js.DeleteStream(context.Background(), env.stream) })
	return env
}

// A MessageID function that fails on a message that also came without a
// broker id still dead-letters it (under the synthesized id), with the
// function's error as the reason.
func TestMessageIDFailsWithoutBrokerID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.SQLite(t)
	bizTable(t, d)
	b := memNoID(t, "orders")
	reg, m := newMetrics(t)
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), b.sub, consumer.Config[*sqlTx]{
		Name: "billing", FetchWait: 50 * time.Millisecond, Observer: m, DLQ: letters,
		MessageID: func(msg idem.Message) (string, error) {
			order, ok := strings.CutPrefix(string(msg.Payload), "order:")
			if !ok {
				return "", errors.New("no order id in payload")
			}
			return "invoice:" + order, nil
		},
		Handler: func(ctx context.Context, tx *sqlTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	b.publishRaw(t, "garbage")   // no broker id, and MessageID fails
	b.publishRaw(t, "order:7")   // no broker id, MessageID derives one
	b.publishOK(t, "e-3", "bad") // broker id, MessageID fails: parked under e-3
	waitFor(t, "two letters and invoice:7", func() bool {
		n, _ := letters.CountParked(ctx)
		return n["billing"] == 2 && effects(t, d, "invoice:7") == 1
	})
	ls, err := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	if err != nil || len(ls) != 2 {
		t.Fatalf("letters %+v, %v", ls, err)
	}
	if ls[0].MessageID != "no-id:orders@1" || !strings.Contains(ls[0].Error, "no order id in payload") {
		t.Errorf("first letter %+v, want no-id:orders@1 with the MessageID error", ls[0])
	}
	if ls[1].MessageID != "e-3" {
		t.Errorf("second letter %+v, want e-3", ls[1])
	}
	if got := value(t, reg, "idem_messages_unidentified_total", "consumer=billing"); got != 1 {
		t.Errorf("idem_messages_unidentified_total = %v, want 1", got)
	}
}
