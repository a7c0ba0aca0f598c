package main

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/internal/testdb"
)

// TestServicePostgres runs the example on PostgreSQL (pgx) with the
// in-process memory broker.
func TestServicePostgres(t *testing.T) {
	t.Parallel()
	testService(t, options{DB: testdb.PostgresDatabase(t)}, "idem.")
}

// TestServiceSQLite runs the example on an SQLite file, without any server.
func TestServiceSQLite(t *testing.T) {
	t.Parallel()
	testService(t, options{DB: "sqlite://" + filepath.Join(t.TempDir(), "payments.db")}, "idem_")
}

// TestServiceJetStream runs the example on PostgreSQL with NATS JetStream
// (a stream and subject of its own).
func TestServiceJetStream(t *testing.T) {
	t.Parallel()
	u := os.Getenv("IDEM_TEST_NATS_URL")
	if u == "" {
		t.Skip("IDEM_TEST_NATS_URL is not set: skipping the JetStream variant")
	}
	db := testdb.PostgresDatabase(t)
	name := strings.TrimPrefix(db[strings.LastIndex(db, "/"):], "/t_db_")
	o := options{DB: db, NATS: u, Stream: "EXSVC_" + name, Subject: "exsvc." + name}
	t.Cleanup(func() { // the stream is the test's own: leave nothing on the server
		nc, js, err := idemjetstream.Dial(u)
		if err != nil {
			t.Logf("delete stream %s: %v", o.Stream, err)
			return
		}
		defer nc.Close()
		if err := js.DeleteStream(context.Background(), o.Stream); err != nil {
			t.Logf("delete stream %s: %v", o.Stream, err)
		}
	})
	testService(t, o, "idem.")
}

// TestServiceProviderDropsAnswer loses the provider's answer to the first
// charge (it charges, then drops the connection: what a worker that crashed
// right after the call sees too). The worker calls again with the same
// key and the provider answers from its record: two calls, one charge,
// and the effect completes with the charge's id.
func TestServiceProviderDropsAnswer(t *testing.T) {
	t.Parallel()
	h := start(t, options{DB: "sqlite://" + filepath.Join(t.TempDir(), "payments.db")}, "idem_")
	h.s.Provider.Inject(fakeprovider.Fault{On: fakeprovider.Charges, After: fakeprovider.Drop})
	if r := h.post("k1", `{"amount":1200,"currency":"EUR"}`); r.status != http.StatusCreated {
		t.Fatalf("POST: %+v", r)
	}
	h.drain(1)
	if n := h.s.Provider.PaymentCalls(); n != 2 {
		t.Errorf("%d provider calls, want 2 (the dropped one and its retry)", n)
	}
	charges := h.s.Provider.Charges()
	if len(charges) != 1 {
		t.Fatalf("%d charges, want 1: %+v", len(charges), charges)
	}
	for key, c := range charges {
		var attempts int
		var state string
		var result []byte
		if err := h.s.DB.QueryRow(h.ctx, `SELECT attempts, state, result FROM `+h.table("effects")+` WHERE effect_key = $1`, key).
			Scan(&attempts, &state, &result); err != nil {
			t.Fatalf("effect %s: %v", key, err)
		}
		if c.Calls != 2 || attempts != 2 || state != "completed" || !strings.Contains(string(result), `"id":"`+c.ID+`"`) {
			t.Errorf("charge %s: %+v, effect %s after %d attempts with %s; want two calls under the effect's key and the effect completed on its second attempt with %s",
				key, c, state, attempts, result, c.ID)
		}
	}
	h.shutdown()
}

// TestRunRefusesOtherDatabases checks that a database URL the example does
// not serve is a bad command line (idem.ErrInvalidOption, exit status 2),
// refused before anything starts.
func TestRunRefusesOtherDatabases(t *testing.T) {
	for _, u := range []string{"mysql://root@127.0.0.1/test", "payments.db", ""} {
		err := run(context.Background(), options{DB: u, Addr: "127.0.0.1:0"}, func(*service) { t.Errorf("%q: started", u) })
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("run(%q) = %v, want an error wrapping idem.ErrInvalidOption", u, err)
		}
	}
}

type response struct {
	status   int
	body     string
	replayed bool
}

// harness is a service started in-process on a loopback port.
type harness struct {
	t      *testing.T
	ctx    context.Context
	s      *service
	prefix string             // of idem's tables: "idem." (PostgreSQL) or "idem_" (SQLite)
	stop   context.CancelFunc // cancels run's context
	errc   chan error         // run's result
}

// start runs the service with o until the test ends.
func start(t *testing.T, o options, prefix string) *harness {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	o.Addr = "127.0.0.1:0"
	h := &harness{t: t, ctx: ctx, prefix: prefix, stop: stop, errc: make(chan error, 1)}
	started := make(chan *service, 1)
	go func() { h.errc <- run(runCtx, o, func(s *service) { started <- s }) }()
	select {
	case h.s = <-started:
	case err := <-h.errc:
		t.Fatalf("run returned before serving: %v", err)
	case <-ctx.Done():
		t.Fatal("the service did not start")
	}
	return h
}

// table names one of idem's tables.
func (h *harness) table(name string) string { return h.prefix + name }

// count runs a SELECT count(*).
func (h *harness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.s.DB.QueryRow(h.ctx, sql, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// post sends POST /payments with an Idempotency-Key.
func (h *harness) post(key, body string) response {
	req, _ := http.NewRequestWithContext(h.ctx, http.MethodPost, h.s.URL+"/payments", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Errorf("POST %s: %v", key, err)
		return response{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{res.StatusCode, string(b), res.Header.Get("Idempotent-Replayed") == "true"}
}

// drain waits until n effects are completed.
func (h *harness) drain(n int) {
	h.t.Helper()
	completed := `SELECT count(*) FROM ` + h.table("effects") + ` WHERE state = 'completed'`
	for deadline := time.Now().Add(30 * time.Second); h.count(completed) != n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("the pipeline did not drain: %d completed effects, %d charges, want %d", h.count(completed), len(h.s.Provider.Charges()), n)
		}
	}
}

// shutdown cancels the service's context and checks that idem.Run returns
// nil and the HTTP server is closed.
func (h *harness) shutdown() {
	h.t.Helper()
	h.stop()
	select {
	case err := <-h.errc:
		if err != nil {
			h.t.Fatalf("idem.Run returned %v after the cancel, want nil", err)
		}
	case <-time.After(40 * time.Second):
		h.t.Fatal("the service did not stop")
	}
	if res, err := http.Post(h.s.URL+"/payments", "application/json", nil); err == nil {
		res.Body.Close()
		h.t.Errorf("the HTTP server still answers after the stop: %s", res.Status)
	}
}

// testService sends payments with repeated, concurrent and conflicting
// Idempotency-Keys, waits for the pipeline to drain, checks that each
// payment has one row, one inbox record, one completed effect and one
// provider call, republishes an event with its id and checks nothing is
// applied twice, and stops the service by cancelling its context.
func testService(t *testing.T, o options, prefix string) {
	h := start(t, o, prefix)
	s, ctx, post, count, table := h.s, h.ctx, h.post, h.count, h.table

	// k1: the same request three times in a row: one 201, then replays.
	first := post("k1", `{"amount":1200,"currency":"EUR"}`)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first POST: %+v, want a fresh 201", first)
	}
	for i := range 2 {
		if r := post("k1", `{"amount":1200,"currency":"EUR"}`); r.status != http.StatusCreated || !r.replayed || r.body != first.body {
			t.Errorf("retry %d of k1: %+v, want the replayed %q", i, r, first.body)
		}
	}
	// k2: eight at once: one executes, the others replay it or answer 409
	// (in flight); none creates a second payment.
	var wg sync.WaitGroup
	rs := make([]response, 8)
	for i := range rs {
		wg.Go(func() { rs[i] = post("k2", `{"amount":500,"currency":"USD"}`) })
	}
	wg.Wait()
	fresh, k2 := 0, ""
	for _, r := range rs {
		switch {
		case r.status == http.StatusCreated && !r.replayed:
			fresh++
			k2 = r.body
		case r.status != http.StatusCreated && r.status != http.StatusConflict:
			t.Errorf("concurrent k2: %+v, want 201 or 409", r)
		}
	}
	t.Logf("eight concurrent POSTs of k2: %d fresh, statuses %v", fresh, statuses(rs))
	if fresh != 1 {
		t.Fatalf("concurrent k2: %d fresh 201s in %+v, want exactly 1", fresh, rs)
	}
	if r := post("k2", `{"amount":500,"currency":"USD"}`); !r.replayed || r.body != k2 {
		t.Errorf("k2 after the burst: %+v, want the replay of %q", r, k2)
	}
	// k3: the same key with another body is refused.
	if r := post("k3", `{"amount":700,"currency":"EUR"}`); r.status != http.StatusCreated {
		t.Fatalf("k3: %+v", r)
	}
	if r := post("k3", `{"amount":9999,"currency":"EUR"}`); r.status != http.StatusUnprocessableEntity {
		t.Errorf("k3 with another body: %+v, want 422", r)
	}
	if r := post("k4", `{"amount":-1}`); r.status != http.StatusBadRequest {
		t.Errorf("invalid body: %+v, want 400", r)
	}

	const payments = 3
	h.drain(payments)
	check := func(when string) {
		t.Helper()
		for _, k := range []string{"k1", "k2", "k3"} {
			if n := count(`SELECT count(*) FROM payments WHERE idempotency_key = $1`, k); n != 1 {
				t.Errorf("%s: %d payments for %s, want 1", when, n, k)
			}
		}
		for what, sql := range map[string]string{
			"payments":         `SELECT count(*) FROM payments`,
			"published events": `SELECT count(*) FROM ` + table("outbox") + ` WHERE published_at > 0`,
			"inbox records of the events": `SELECT count(*) FROM ` + table("outbox") + ` o JOIN ` + table("inbox") +
				` i ON i.message_id = o.event_id AND i.consumer = 'charges'`,
			"inbox records": `SELECT count(*) FROM ` + table("inbox"),
			"completed effects of the payments": `SELECT count(*) FROM payments p JOIN ` + table("effects") +
				` e ON e.effect_key = 'charge:' || p.id WHERE e.state = 'completed' AND e.attempts = 1`,
			"effects":      `SELECT count(*) FROM ` + table("effects"),
			"dead letters": `SELECT count(*) FROM ` + table("dead_letters") + ``,
		} {
			want := payments
			if what == "dead letters" {
				want = 0
			}
			if n := count(sql); n != want {
				t.Errorf("%s: %d %s, want %d", when, n, what, want)
			}
		}
		if n := s.Provider.PaymentCalls(); n != payments {
			t.Errorf("%s: %d provider calls, want %d", when, n, payments)
		}
		charges := s.Provider.Charges()
		if len(charges) != payments {
			t.Errorf("%s: %d charges, want %d", when, len(charges), payments)
		}
		for key, c := range charges {
			if !strings.HasPrefix(key, "charge:pay_") || c.Calls != 1 {
				t.Errorf("%s: charge %s: %+v, want one call under the ledger's key", when, key, c)
			}
		}
	}
	check("drained")

	// Redeliver: publish the first event again with its message id.
	var msg idem.Message
	msg.Subject = cmp.Or(o.Subject, "payments.created")
	if err := s.DB.QueryRow(ctx, `SELECT event_id, ordering_key, payload FROM `+table("outbox")+` ORDER BY seq LIMIT 1`).
		Scan(&msg.ID, &msg.Key, &msg.Payload); err != nil {
		t.Fatal(err)
	}
	if s.Memory != nil {
		acked := s.Memory.Stats().Acked
		if err := s.Pub.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
		// The consumer gets it, finds it in its inbox and acknowledges it.
		for deadline := time.Now().Add(10 * time.Second); s.Memory.Stats().Acked == acked; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the republished event was never acknowledged")
			}
		}
	} else {
		redeliverJetStream(ctx, t, o, msg)
	}
	time.Sleep(300 * time.Millisecond) // the worker's polls: nothing new to claim
	check("after the redelivery")

	h.shutdown()
}

func statuses(rs []response) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.status
	}
	return out
}

// redeliverJetStream publishes msg again twice: with its id, which the
// stream drops inside its duplicate window, and as a redrive (same message
// id, another Nats-Msg-Id), which the stream stores and the consumer
// receives with the same id; it waits until the consumer acknowledged it.
func redeliverJetStream(ctx context.Context, t *testing.T, o options, msg idem.Message) {
	t.Helper()
	nc, js, err := idemjetstream.Dial(o.NATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub, err := idemjetstream.NewPublisher(js, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := pub.PublishResults(ctx, msg); err != nil || len(res) != 1 || !res[0].Duplicate {
		t.Fatalf("republish on JetStream: %+v, %v; want a duplicate", res, err)
	}
	msg.Headers = map[string]string{broker.HeaderRedrive: "test"}
	res, err := pub.PublishResults(ctx, msg)
	if err != nil || len(res) != 1 || res[0].Duplicate {
		t.Fatalf("redrive on JetStream: %+v, %v; want it stored", res, err)
	}
	seq, _ := strconv.ParseUint(res[0].Position, 10, 64)
	cons, err := js.Consumer(ctx, o.Stream, "charges")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.AckFloor.Stream >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the redriven event (stream seq %d) was never acknowledged: %+v", seq, info.AckFloor)
		}
	}
}
