package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/store/sqlstore"
)

// runCmd runs one idem command line in-process.
func runCmd(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}
	code = run(context.Background(), env, args)
	return code, out.String(), errb.String()
}

// newDLQEnv migrates a fresh SQLite database, sets vars'
// IDEM_DATABASE_URL to it, and starts an embedded JetStream with an ORDERS
// stream on subject "orders"; it returns the database's dead-letter store
// (to park letters in), the server and its JetStream context. Everything
// is closed when the test ends.
func newDLQEnv(t *testing.T, vars map[string]string) (*dlq.Store[*sql.Tx], *embedded.Server, js.JetStream) {
	t.Helper()
	letters := newDLQDB(t, vars)
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, j, err := idemjetstream.Dial(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := idemjetstream.EnsureStream(context.Background(), j, js.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}, Storage: js.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return letters, srv, j
}

// newDLQDB migrates a fresh SQLite database, sets vars'
// IDEM_DATABASE_URL to it and returns its dead-letter store.
func newDLQDB(t *testing.T, vars map[string]string) *dlq.Store[*sql.Tx] {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	vars["IDEM_DATABASE_URL"] = "sqlite://" + path
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return letters
}

func TestDLQGCStatsCommands(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"USER": "tester"}
	letters, srv, j := newDLQEnv(t, vars)
	ctx := context.Background()
	for i, id := range []string{"a", "b", "c", "d"} {
		class := idem.Permanent(errors.New("bad"))
		if i == 3 {
			class = idem.ErrInvalidInput
		}
		if _, err := letters.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{"x":1}`), Attempt: 1}, class)); err != nil {
			t.Fatal(err)
		}
	}

	code, out, stderr := runCmd(t, vars, "dlq", "list", "--json", "--class", "permanent")
	if code != 0 {
		t.Fatalf("list: %d %s", code, stderr)
	}
	var ls []dlq.Letter
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls) != 3 {
		t.Fatalf("list --json: %v %s", err, out)
	}
	if code, out, _ = runCmd(t, vars, "dlq", "show", "1"); code != 0 || !strings.Contains(out, `{"x":1}`) || !strings.Contains(out, "billing") {
		t.Fatalf("show: %d %s", code, out)
	}
	if code, _, _ = runCmd(t, vars, "dlq", "discard", "4"); code != 0 {
		t.Fatal("discard failed")
	}
	if code, _, stderr = runCmd(t, vars, "dlq", "redrive", "--all"); code != 2 || !strings.Contains(stderr, "--nats") {
		t.Fatalf("redrive without a broker: %d %s", code, stderr)
	}
	// Flags after the action and ids work too.
	if code, out, stderr = runCmd(t, vars, "dlq", "redrive", "1", "--nats", srv.ClientURL(), "--by", "alice"); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("redrive 1: %d %s %s", code, out, stderr)
	}
	if code, _, stderr = runCmd(t, vars, "dlq", "redrive", "1", "--nats", srv.ClientURL()); code != 1 || !strings.Contains(stderr, "not parked") {
		t.Fatalf("second redrive: %d %s", code, stderr)
	}
	if code, out, stderr = runCmd(t, vars, "dlq", "redrive", "--all", "--consumer", "billing", "--json", "--nats", srv.ClientURL()); code != 0 || !strings.Contains(out, `"redriven":2`) {
		t.Fatalf("redrive --all: %d %s %s", code, out, stderr)
	}
	stream, _ := j.Stream(ctx, "ORDERS")
	info, _ := stream.Info(ctx)
	if info.State.Msgs != 3 {
		t.Fatalf("stream holds %d messages, want 3 redriven", info.State.Msgs)
	}
	if l, _ := letters.Get(ctx, 1); l.RedrivenBy != "alice" {
		t.Fatalf("redriven by %q", l.RedrivenBy)
	}
	if code, out, _ = runCmd(t, vars, "dlq", "list", "--state", "any"); code != 0 || strings.Count(out, "billing") != 4 {
		t.Fatalf("list --state any: %s", out)
	}

	// gc: resolved letters are kept 30 days by default; --dlq-retention 1ns drops them.
	time.Sleep(time.Millisecond)
	code, out, stderr = runCmd(t, vars, "gc", "--once", "--json", "--dlq-retention", "1ns")
	if code != 0 {
		t.Fatalf("gc: %s", stderr)
	}
	var rep struct{ Deleted map[string]int64 }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Deleted["dead_letters"] != 4 {
		t.Fatalf("gc report: %v %s", err, out)
	}

	// stats: JSON and the human table carry the same numbers.
	if _, err := letters.Park(ctx, dlq.FromMessage("shipping", idem.Message{ID: "z", Payload: []byte("x")}, errors.New("boom"))); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCmd(t, vars, "stats", "--json")
	if code != 0 {
		t.Fatalf("stats: %s", stderr)
	}
	var st struct {
		DeadLetters struct {
			Total int64
			By    map[string]int64
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.DeadLetters.Total != 1 || st.DeadLetters.By["parked"] != 1 {
		t.Fatalf("stats --json: %v %s", err, out)
	}
	if code, out, _ = runCmd(t, vars, "stats"); code != 0 || !strings.Contains(out, "parked consumer shipping") {
		t.Fatalf("stats: %s", out)
	}
}

// testRedriveTo runs the redrive guarantees against one broker: a letter
// is republished with its id, key, headers and payload (marked as a
// redrive), a second redrive is refused, a letter past its replay horizon
// is refused and publishes nothing, and --force --reason redrives it with
// the reason recorded. receive returns what the broker delivered within
// wait.
func testRedriveTo(t *testing.T, brokerArgs []string, subject string, receive func(t *testing.T, wait time.Duration) []idem.Message) {
	t.Helper()
	vars := map[string]string{"USER": "tester"}
	letters := newDLQDB(t, vars)
	ctx := context.Background()
	fresh := dlq.FromMessage("billing", idem.Message{ID: "m-fresh", Subject: subject, Key: "order-1",
		Headers: map[string]string{"ce-type": "order.paid"}, Payload: []byte(`{"order":1}`), Attempt: 1}, idem.Permanent(errors.New("bad")))
	id, err := letters.Park(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	old := dlq.FromMessage("billing", idem.Message{ID: "m-old", Subject: subject, Payload: []byte(`{"order":2}`)}, idem.Permanent(errors.New("bad")))
	old.LastFailedAt = time.Now().Add(-30 * 24 * time.Hour) // older than the 7-day inbox retention
	oldID, err := letters.Park(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	redrive := func(args ...string) (int, string, string) {
		return runCmd(t, vars, append(append([]string{"dlq", "redrive"}, args...), brokerArgs...)...)
	}

	if code, out, stderr := redrive(strconv.FormatInt(id, 10), "--by", "alice"); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("redrive: %d %s %s", code, out, stderr)
	}
	got := receive(t, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("the broker delivered %d messages, want the redriven one", len(got))
	}
	if m := got[0]; m.ID != "m-fresh" || m.Key != "order-1" || m.Headers["ce-type"] != "order.paid" || string(m.Payload) != `{"order":1}` ||
		m.Headers[broker.HeaderRedrive] != strconv.FormatInt(id, 10) {
		t.Fatalf("redriven message %+v: want the original id, key, headers and payload, marked as a redrive", m)
	}
	if l, _ := letters.Get(ctx, id); l.State != dlq.Redriven || l.RedrivenBy != "alice" {
		t.Fatalf("letter after redrive: %+v", l)
	}
	if code, _, stderr := redrive(strconv.FormatInt(id, 10)); code != 1 || !strings.Contains(stderr, "not parked") {
		t.Fatalf("second redrive: %d %s", code, stderr)
	}

	// Past the replay horizon: refused, nothing published, still parked.
	if code, _, stderr := redrive(strconv.FormatInt(oldID, 10)); code != 1 || !strings.Contains(stderr, "refused") {
		t.Fatalf("redrive past the horizon: %d %s, want a refusal", code, stderr)
	}
	if got := receive(t, time.Second); len(got) != 0 {
		t.Fatalf("a refused redrive published %+v", got)
	}
	if l, _ := letters.Get(ctx, oldID); l.State != dlq.Parked {
		t.Fatalf("refused letter is %s, want parked", l.State)
	}
	if code, out, stderr := redrive("--all", "--force", "--reason", "checked: never applied", "--json"); code != 0 || !strings.Contains(out, `"redriven":1`) {
		t.Fatalf("forced redrive: %d %s %s", code, out, stderr)
	}
	if got := receive(t, 10*time.Second); len(got) != 1 || got[0].ID != "m-old" {
		t.Fatalf("forced redrive delivered %+v, want m-old", got)
	}
	if l, _ := letters.Get(ctx, oldID); l.State != dlq.Redriven || l.RedriveReason != "checked: never applied" || l.RedrivenBy != "tester" {
		t.Fatalf("forced letter: %+v, want redriven by tester with the reason", l)
	}
}

// fetchAll fetches what sub delivers within wait and acks it.
func fetchAll(t *testing.T, sub broker.Subscriber, wait time.Duration) []idem.Message {
	t.Helper()
	var out []idem.Message
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ds, err := sub.Fetch(t.Context(), 10, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			out = append(out, d.Message())
			if err := d.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if len(out) > 0 && len(ds) == 0 {
			break
		}
	}
	return out
}

func dlqUnique() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

func TestDLQRedriveAMQP(t *testing.T) {
	t.Parallel()
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	q := "idem-redrive-" + dlqUnique()
	if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
	sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	testRedriveTo(t, []string{"--broker", url}, q, func(t *testing.T, wait time.Duration) []idem.Message { return fetchAll(t, sub, wait) })
}

func TestDLQRedriveKafka(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	topic := "orders-" + dlqUnique()
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := idemkafka.EnsureTopic(t.Context(), pub.Client(), topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: topic + "-check", Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	testRedriveTo(t, []string{"--broker", "kafka://" + strings.Join(addrs, ",")}, topic,
		func(t *testing.T, wait time.Duration) []idem.Message { return fetchAll(t, sub, wait) })
}

// --broker nats://… reaches JetStream like --nats.
func TestDLQRedriveNATSBroker(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, j, err := idemjetstream.Dial(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subject := "orders-" + dlqUnique()
	if _, err := idemjetstream.EnsureStream(t.Context(), j, js.StreamConfig{Name: "R", Subjects: []string{subject}, Storage: js.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	sub, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: "R", Durable: "check"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	testRedriveTo(t, []string{"--broker", srv.ClientURL()}, subject,
		func(t *testing.T, wait time.Duration) []idem.Message { return fetchAll(t, sub, wait) })
}

func TestDLQRedriveBrokerFlags(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"USER": "tester"}
	letters := newDLQDB(t, vars)
	if _, err := letters.Park(context.Background(), dlq.FromMessage("billing", idem.Message{ID: "m", Subject: "s", Payload: []byte("x")}, errors.New("boom"))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker", "nats://127.0.0.1:1", "--nats", "nats://127.0.0.1:1"}, "not both"},
		{[]string{"--broker", "mqtt://host:1883"}, "unknown broker scheme"},
		{[]string{"--broker", "memory://"}, "memory broker"},
		{[]string{"--broker", "kafka://"}, "kafka://host:port"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--exchange", "x"}, "--exchange is for RabbitMQ"},
	} {
		code, _, stderr := runCmd(t, vars, append([]string{"dlq", "redrive", "1"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("redrive %v: %d %s, want a usage error with %q", tc.args, code, stderr, tc.want)
		}
	}
	// An unreachable broker fails the redrive without showing the URL's password.
	code, _, stderr := runCmd(t, vars, "dlq", "redrive", "1", "--broker", "amqp://guest:s3cret@127.0.0.1:1/")
	if code != 1 || strings.Contains(stderr, "s3cret") {
		t.Errorf("redrive to an unreachable broker: %d %s, want a failure without the password", code, stderr)
	}
	if l, _ := letters.Get(context.Background(), 1); l.State != dlq.Parked {
		t.Fatalf("letter %s after refused invocations, want parked", l.State)
	}
}
