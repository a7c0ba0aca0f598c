package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
)

// TestBrokerFlagErrors: an unknown --broker, a broker's address given for
// another broker, RabbitMQ without --amqp, a malformed --kafka or --amqp
// are usage errors of drill, demo and worker: exit 2, one line on stderr,
// nothing on stdout, no URL password shown.
func TestBrokerFlagErrors(t *testing.T) {
	t.Parallel()
	const secret = "hunter4-broker-secret"
	amqpURL := "amqp://guest:" + secret + "@127.0.0.1:1/"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown broker", []string{"--broker", "pulsar"}, "pulsar"},
		{"rabbitmq without --amqp", []string{"--broker", "rabbitmq"}, "--amqp"},
		{"--kafka with nats", []string{"--broker", "nats", "--kafka", "127.0.0.1:9092"}, "--kafka is for --broker kafka"},
		{"--kafka by default", []string{"--kafka", "127.0.0.1:9092"}, "--kafka is for --broker kafka"},
		{"--amqp with kafka", []string{"--broker", "kafka", "--amqp", amqpURL}, "--amqp is for --broker rabbitmq"},
		{"--nats with rabbitmq", []string{"--broker", "rabbitmq", "--amqp", amqpURL, "--nats", "nats://127.0.0.1:4222"}, "--nats is for --broker nats"},
		{"--kafka without port", []string{"--broker", "kafka", "--kafka", "localhost"}, "host:port"},
		{"--amqp not amqp", []string{"--broker", "rabbitmq", "--amqp", "http://guest:" + secret + "@127.0.0.1/"}, "amqp://"},
	}
	for _, cmd := range []string{"drill", "demo", "worker"} {
		for _, c := range cases {
			t.Run(cmd+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{cmd}, c.args...)
				if cmd == "worker" {
					args = append(args, "--role", "relay", "--db", "sqlite://"+t.TempDir()+"/x.db")
				}
				if cmd == "demo" {
					args = append(args, "--addr", "127.0.0.1:0", "--data", t.TempDir())
				}
				code, stdout, stderr := runCmd(t, nil, args...)
				if code != 2 {
					t.Errorf("exit %d, want 2 (stderr %q)", code, stderr)
				}
				if stdout != "" {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
				if len(lines) != 1 || !strings.HasPrefix(lines[0], "idem "+cmd+": ") || !strings.Contains(lines[0], c.want) {
					t.Errorf("stderr %q: want one line \"idem %s: …%s…\"", stderr, cmd, c.want)
				}
				if strings.Contains(stderr, secret) {
					t.Errorf("stderr shows the password: %q", stderr)
				}
			})
		}
	}
}

// TestWorkerNeedsSharedBroker: a worker joins servers other processes
// share, so --broker kafka needs --kafka (or IDEM_KAFKA_BROKERS) and the
// RabbitMQ URL may come from IDEM_AMQP_URL.
func TestWorkerNeedsSharedBroker(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + t.TempDir() + "/x.db"
	code, _, stderr := runCmd(t, nil, "worker", "--broker", "kafka", "--role", "relay", "--db", db)
	if code != 2 || !strings.Contains(stderr, "--kafka") {
		t.Errorf("kafka without seeds: exit %d %q", code, stderr)
	}
	code, _, stderr = runCmd(t, map[string]string{"IDEM_KAFKA_BROKERS": "no-port"}, "worker", "--broker", "kafka", "--role", "relay", "--db", db)
	if code != 2 || !strings.Contains(stderr, "host:port") {
		t.Errorf("IDEM_KAFKA_BROKERS without port: exit %d %q", code, stderr)
	}
	code, _, stderr = runCmd(t, map[string]string{"IDEM_AMQP_URL": "http://x/"}, "worker", "--broker", "rabbitmq", "--role", "relay", "--db", db)
	if code != 2 || !strings.Contains(stderr, "amqp://") {
		t.Errorf("IDEM_AMQP_URL not amqp: exit %d %q", code, stderr)
	}
}

// TestDrillOnKafkaAndRabbitMQ: idem drill --broker kafka runs on its
// in-process cluster with zero set-up, --broker rabbitmq on the RabbitMQ of
// IDEM_TEST_AMQP_URL; the banner names the broker (no password).
func TestDrillOnKafkaAndRabbitMQ(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := drillCmd(t, "--broker", "kafka", "--scenario", "crash-before-ack", "--orders", "40", "--workers", "2")
	if code != 0 || !strings.Contains(stdout, "PASS: 1/1") || !strings.Contains(stdout, "broker:   Kafka, in-process cluster") {
		t.Fatalf("kafka: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	code, stdout, stderr = drillCmd(t, "--broker", "rabbitmq", "--amqp", url, "--scenario", "crash-before-ack", "--orders", "40", "--workers", "2")
	if code != 0 || !strings.Contains(stdout, "PASS: 1/1") || !strings.Contains(stdout, "broker:   RabbitMQ amqp://guest:xxxxx@") {
		t.Fatalf("rabbitmq: exit %d:\n%s\n%s", code, stdout, stderr)
	}
	// An unreachable RabbitMQ is a configuration error, before any scenario.
	code, stdout, stderr = drillCmd(t, "--broker", "rabbitmq", "--amqp", "amqp://guest:hunter5@127.0.0.1:1/", "--orders", "20")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "cannot connect to RabbitMQ") || strings.Contains(stderr, "hunter5") {
		t.Fatalf("unreachable rabbitmq: exit %d %q %q", code, stdout, stderr)
	}
}

// TestDLQLettersOfEveryBroker: letters the reference system parked on
// Kafka and on RabbitMQ are listed, shown, discarded and redriven by idem
// dlq, and a redriven letter reaches the consumer through the broker again
// (Kafka: its topic; RabbitMQ: --exchange amq.direct, routed to every
// consumer queue) and takes effect once.
func TestDLQLettersOfEveryBroker(t *testing.T) {
	t.Parallel()
	cluster, err := boxoffice.StartKafka()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cases := []struct {
		name   string
		opts   boxoffice.Options
		target []string
	}{
		{"kafka", boxoffice.Options{Broker: boxoffice.BrokerKafka, Kafka: cluster.ListenAddrs(), KafkaSessionTimeout: boxoffice.KafkaSessionTimeout},
			[]string{"--broker", "kafka://" + strings.Join(cluster.ListenAddrs(), ",")}},
	}
	if url := os.Getenv("IDEM_TEST_AMQP_URL"); url != "" {
		cases = append(cases, struct {
			name   string
			opts   boxoffice.Options
			target []string
		}{"rabbitmq", boxoffice.Options{Broker: boxoffice.BrokerRabbitMQ, AMQPURL: url}, []string{"--broker", url, "--exchange", boxoffice.DefaultAMQPExchange}})
	} else {
		t.Log("IDEM_TEST_AMQP_URL not set: RabbitMQ not run; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testDLQLetters(t, c.opts, c.target)
		})
	}
}

func testDLQLetters(t *testing.T, o boxoffice.Options, target []string) {
	ctx := context.Background()
	var bug atomic.Bool
	bug.Store(true)
	o.DataDir = t.TempDir()
	o.Config = boxoffice.Config{WebhookSecrets: []string{testSecret}, Subject: "idem-dlq-test." + dlqUnique(),
		PollInterval: 20 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Hooks: boxoffice.Hooks{Fault: func(consumer string, _ boxoffice.OrderConfirmed, _ idem.Message) error {
			if consumer == boxoffice.ConsumerBilling && bug.Load() {
				return idem.Permanent(errors.New("billing bug"))
			}
			return nil
		}}}
	sys, err := boxoffice.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if b, ok := sys.Config().Broker.(*boxoffice.AMQPBroker); ok {
		defer func() {
			_ = b.DeleteQueues(boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch)
		}()
	}
	if err := sys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sys.Handler())
	defer srv.Close()
	for i := range 2 {
		body := fmt.Sprintf(`{"event_id":"concert-1","customer_email":"c%d@example.com","seats":1,"total_cents":100,"currency":"EUR"}`, i)
		if r := call(t, http.MethodPost, srv.URL+"/orders", map[string]string{"Idempotency-Key": fmt.Sprintf("dlq-%d", i), "Content-Type": "application/json"}, body); r.status != http.StatusCreated {
			t.Fatalf("order %d: %d %s", i, r.status, r.body)
		}
	}
	st := waitStats(t, sys, func(st boxoffice.Stats) bool { return st.DeadLetters == 2 })
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(o.DataDir, "idem.db")}
	code, out, stderr := runCmd(t, vars, "dlq", "list", "--consumer", boxoffice.ConsumerBilling, "--json")
	var listed []struct {
		ID       int64  `json:"id"`
		Source   string `json:"source"`
		Position string `json:"position"`
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed) != 2 {
		t.Fatalf("dlq list: exit %d %v %q %q", code, err, out, stderr)
	}
	for _, l := range listed {
		if l.Source != o.Config.Subject || l.Position == "" {
			t.Fatalf("letter %+v: want the source %s and the broker's position", l, o.Config.Subject)
		}
	}
	first, second := fmt.Sprint(listed[0].ID), fmt.Sprint(listed[1].ID)
	if code, out, stderr := runCmd(t, vars, "dlq", "show", first); code != 0 || !strings.Contains(out, "billing bug") {
		t.Fatalf("dlq show: exit %d %q %q", code, out, stderr)
	}
	if code, out, stderr := runCmd(t, vars, "dlq", "discard", second, "--by", "alice"); code != 0 || !strings.Contains(out, "discarded 1") {
		t.Fatalf("dlq discard: exit %d %q %q", code, out, stderr)
	}
	bug.Store(false)
	if code, out, stderr := runCmd(t, vars, append([]string{"dlq", "redrive", first, "--by", "alice"}, target...)...); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("dlq redrive: exit %d %q %q", code, out, stderr)
	}
	st = waitStats(t, sys, func(st boxoffice.Stats) bool { return st.Invoices == 1 })
	if st.Invoices != 1 || st.DeadLetters != 0 {
		t.Fatalf("after the redrive: %+v, want one invoice (the redriven order's) and no parked letter", st)
	}
}

// waitStats polls sys's stats until ok holds (or a minute passed) and
// returns the last.
func waitStats(t *testing.T, sys *boxoffice.System[any], ok func(boxoffice.Stats) bool) boxoffice.Stats {
	t.Helper()
	var st boxoffice.Stats
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if st, err = sys.Stats(context.Background()); err == nil && ok(st) {
			return st
		}
	}
	return st
}

// TestDemoOnKafka: idem demo --broker kafka runs with zero set-up on its
// in-process cluster: an order placed over HTTP is published to the topic,
// consumed (invoice, e-mail) and counted in /stats.
func TestDemoOnKafka(t *testing.T) {
	t.Parallel()
	url, stop := startDemo(t, "--broker", "kafka")
	hdr := map[string]string{"Idempotency-Key": "kafka-1", "X-Tenant-ID": "acme", "Content-Type": "application/json"}
	if r := call(t, http.MethodPost, url+"/orders", hdr, `{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var st boxoffice.Stats
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r := call(t, http.MethodGet, url+"/stats", nil, "")
		// The relay marks the event published after the broker took it,
		// so the consumers can finish before the mark commits: wait for
		// all three.
		if err := json.Unmarshal(r.body, &st); err == nil && st.EventsPublished == 1 && st.Invoices == 1 && st.EmailsSent == 1 {
			break
		}
	}
	if st.Orders != 1 || st.EventsPublished != 1 || st.Invoices != 1 || st.EmailsSent != 1 {
		t.Fatalf("stats %+v: want the order published, invoiced and e-mailed once", st)
	}
	if err := stop(); err != nil {
		t.Fatalf("demo stopped with %v", err)
	}
}
