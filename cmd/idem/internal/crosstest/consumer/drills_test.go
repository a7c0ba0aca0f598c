package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Drill 4: the consumer commits and "crashes" before the ack for 10% of the
// messages; after redelivery every effect exists exactly once.
func TestDrill4CrashBeforeAck(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 8} {
		t.Run(fmt.Sprintf("pgx/batch%d", batch), func(t *testing.T) {
			t.Parallel()
			testCrashBeforeAck(t, testdb.Pgx(t), batch)
		})
	}
	t.Run("sqlite/batch1", func(t *testing.T) { t.Parallel(); testCrashBeforeAck(t, testdb.SQLite(t), 1) })
}

func testCrashBeforeAck[TTx any](t *testing.T, d store.Driver[TTx], batch int) {
	ctx := context.Background()
	bizTable(t, d)
	env := startNATS(t)
	reg, m := newMetrics(t)
	const n = 60
	var crashes atomic.Int64
	var crashed sync.Map
	c, err := consumer.New(newInbox(t, d), env.subscriber(t, "billing", 300*time.Millisecond), consumer.Config[TTx]{
		Name: "billing", Concurrency: 3, BatchSize: batch, FetchWait: 100 * time.Millisecond, Observer: m,
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
		Hooks: consumer.Hooks{AfterCommit: func(msg idem.Message) error {
			var i int
			fmt.Sscanf(msg.ID, "m-%d", &i)
			// The first commit of every tenth message crashes (its first
			// commit, not its first attempt: on a loaded machine the ack
			// wait can expire before a first attempt commits).
			if _, again := crashed.LoadOrStore(msg.ID, true); i%10 == 0 && !again {
				crashes.Add(1)
				return errors.New("simulated crash between commit and ack")
			}
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	for i := range n {
		if err := env.pub.Publish(ctx, idem.Message{ID: fmt.Sprintf("m-%d", i), Subject: env.subject, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	// Every crashed message is redelivered and acked as a duplicate.
	waitFor(t, "all messages processed and crashed ones redelivered", func() bool {
		return value(t, reg, "idem_messages_processed_total", "consumer=billing") == n &&
			value(t, reg, "idem_duplicates_suppressed_total", "component=consumer,consumer=billing") >= n/10
	})
	if crashes.Load() != n/10 {
		t.Fatalf("crashes = %d, want %d", crashes.Load(), n/10)
	}
	if got := effects(t, d, ""); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
	if got := testdb.Count(t, d, `SELECT count(DISTINCT message_id) FROM biz_effects`); got != n {
		t.Fatalf("distinct effects = %d, want %d", got, n)
	}
	if got := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = 'billing'`); got != n {
		t.Fatalf("inbox rows = %d, want %d", got, n)
	}
}

// Drill 9: two consumer instances receive the same message at the same time
// (two subscriptions deliver every message to both) → one effect.
func TestDrill9ConcurrentInstances(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testConcurrentInstances(t, d.D) })
}

func testConcurrentInstances[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	env := startNATS(t)
	reg, m := newMetrics(t)
	const n = 30
	ib := newInbox(t, d)
	var runs atomic.Int64
	for _, durable := range []string{"instance-a", "instance-b"} {
		c, err := consumer.New(ib, env.subscriber(t, durable, 5*time.Second), consumer.Config[TTx]{
			Name: "billing", FetchWait: 100 * time.Millisecond, Observer: m,
			Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
				runs.Add(1)
				time.Sleep(5 * time.Millisecond) // widen the overlap
				return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		start(t, c)
	}
	for i := range n {
		if err := env.pub.Publish(ctx, idem.Message{ID: fmt.Sprintf("m-%d", i), Subject: env.subject, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both instances settled every message", func() bool {
		return value(t, reg, "idem_messages_processed_total", "consumer=billing")+
			value(t, reg, "idem_duplicates_suppressed_total", "component=consumer,consumer=billing") == 2*n
	})
	if got, distinct := effects(t, d, ""), testdb.Count(t, d, `SELECT count(DISTINCT message_id) FROM biz_effects`); got != n || distinct != n {
		t.Fatalf("effects = %d (distinct %d), want %d", got, distinct, n)
	}
	if p := value(t, reg, "idem_messages_processed_total", "consumer=billing"); p != n {
		t.Fatalf("processed = %v, want %d (handler runs incl. rolled back: %d)", p, n, runs.Load())
	}
}

// Drill 10: transient twice then success → one effect, attempts recorded;
// permanent → one dead letter with full context, nothing else blocked;
// redrive after the fix → exactly one effect; second redrive → no second
// effect. Then /metrics shows counters matching what happened.
func TestDrill10RetryDeadLetterRedrive(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testRetryDeadLetterRedrive(t, d.D) })
}

func testRetryDeadLetterRedrive[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	env := startNATS(t)
	reg, m := newMetrics(t)
	reg.MustRegister(idemmetrics.NewDBCollector(d, idemmetrics.DBConfig{}))
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	c, err := consumer.New(newInbox(t, d), env.subscriber(t, "billing", 5*time.Second), consumer.Config[TTx]{
		Name: "billing", Concurrency: 2, FetchWait: 100 * time.Millisecond, Observer: m, DLQ: letters,
		MaxAttempts: 5, Backoff: consumer.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			switch {
			case msg.ID == "transient-1" && msg.Attempt <= 2:
				return errors.New("database hiccup")
			case msg.ID == "poison-1" && !fixed.Load():
				return idem.Permanent(errors.New("unknown product code"))
			}
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	ids := []string{"transient-1", "poison-1"}
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("ok-%d", i))
	}
	for _, id := range ids {
		msg := idem.Message{ID: id, Subject: env.subject, Key: "order-7", Headers: map[string]string{"ce-type": "order.confirmed"},
			Payload: []byte(`{"id":"` + id + `"}`)}
		if err := env.pub.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "11 processed and 1 parked", func() bool {
		return value(t, reg, "idem_messages_processed_total", "consumer=billing") == 11 &&
			value(t, reg, "idem_dead_letters_total", "class=permanent,consumer=billing") == 1
	})
	// Transient: one effect, on the third attempt.
	var attempt int64
	if err := d.Pool().QueryRow(ctx, `SELECT attempt FROM biz_effects WHERE message_id = 'transient-1'`).Scan(&attempt); err != nil || attempt != 3 {
		t.Fatalf("transient-1 effect attempt = %d, %v; want one effect at attempt 3", attempt, err)
	}
	if n := effects(t, d, "transient-1"); n != 1 {
		t.Fatalf("transient-1 effects = %d", n)
	}
	for i := range 10 { // nothing blocked behind the poison message
		if n := effects(t, d, fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Fatalf("ok-%d effects = %d", i, n)
		}
	}
	// Permanent: one dead letter with full context, no effect.
	ls, err := letters.List(ctx, dlq.Filter{Consumer: "billing", State: dlq.Parked})
	if err != nil || len(ls) != 1 {
		t.Fatalf("parked letters = %v, %v", ls, err)
	}
	l := ls[0]
	if l.MessageID != "poison-1" || l.Source != env.subject || l.Position == "" || l.Key != "order-7" ||
		l.Headers["ce-type"] != "order.confirmed" || string(l.Payload) != `{"id":"poison-1"}` ||
		!strings.Contains(l.Error, "unknown product code") || l.ErrorClass != "permanent" || l.Attempts != 1 {
		t.Fatalf("letter lacks context: %+v", l)
	}
	if n := effects(t, d, "poison-1"); n != 0 {
		t.Fatalf("poison-1 effects before redrive = %d", n)
	}

	// The fix ships; redrive at once: inside JetStream's duplicate window,
	// the redrive is deduplicated under its own id, not the original one.
	fixed.Store(true)
	if _, err := letters.Redrive(ctx, l.ID, "alice", env.pub); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "redriven message processed", func() bool { return effects(t, d, "poison-1") == 1 })
	if _, err := letters.Redrive(ctx, l.ID, "alice", env.pub); !errors.Is(err, dlq.ErrNotParked) {
		t.Fatalf("second redrive = %v, want ErrNotParked", err)
	}
	// Even a forced republish of the same message has no second effect.
	time.Sleep(dupWindow + 50*time.Millisecond)
	if err := env.pub.Publish(ctx, l.Message()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "forced republish deduplicated", func() bool {
		return value(t, reg, "idem_duplicates_suppressed_total", "component=consumer,consumer=billing") == 1
	})
	if n := effects(t, d, "poison-1"); n != 1 {
		t.Fatalf("poison-1 effects = %d, want 1", n)
	}
	if got, _ := letters.Get(ctx, l.ID); got.State != dlq.Redriven || got.RedrivenBy != "alice" {
		t.Fatalf("letter after redrive: %+v", got)
	}

	// /metrics matches what happened.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, line := range []string{
		`idem_messages_processed_total{consumer="billing"} 12`,
		`idem_retries_total{consumer="billing"} 2`,
		`idem_messages_failed_total{class="transient",consumer="billing"} 2`,
		`idem_messages_failed_total{class="permanent",consumer="billing"} 1`,
		`idem_dead_letters_total{class="permanent",consumer="billing"} 1`,
		`idem_duplicates_suppressed_total{component="consumer",consumer="billing"} 1`,
		`idem_in_flight{consumer="billing"} 0`,
		`idem_handler_duration_seconds_count{consumer="billing"} 15`, // handler runs: 3 transient-1, 2 poison-1, 10 ok
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if strings.Contains(text, `idem_dead_letters_parked{`) {
		t.Errorf("a parked-letters series remains after the redrive")
	}
	if !strings.Contains(text, `idem_table_rows{table="dead_letters"}`) {
		t.Errorf("/metrics lacks the table row estimates")
	}
}
