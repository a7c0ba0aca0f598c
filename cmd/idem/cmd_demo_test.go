package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/webhook"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type httpReply struct {
	status int
	header http.Header
	body   []byte
}

func call(t *testing.T, method, url string, hdr map[string]string, body string) httpReply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpReply{resp.StatusCode, resp.Header, b}
}

func problemType(t *testing.T, r httpReply) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d Content-Type %q, want application/problem+json: %s", r.status, ct, r.body)
	}
	var p struct{ Type string }
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	return p.Type
}

// startDemo runs "idem demo" in-process and returns its URL.
func startDemo(t *testing.T, args ...string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	env := &Env{Stdout: pw, Stderr: os.Stderr, Getenv: func(string) string { return "" }}
	go func() {
		err := runDemo(ctx, env, append([]string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--webhook-secret", testSecret}, args...))
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		cancel()
		t.Fatalf("demo printed nothing: %v", <-done)
	}
	line := sc.Text()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	i := strings.Index(line, "http://")
	if i < 0 {
		cancel()
		t.Fatalf("no URL in %q", line)
	}
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() })
	return line[i:], stop
}

// TestDemoEndToEnd drives "idem demo" over HTTP: the Idempotency-Key
// contract (400, 422, 409, replay with Idempotent-Replayed), tenant
// isolation, a signed payment webhook and its replay, and /stats consistent
// with what was sent.
func TestDemoEndToEnd(t *testing.T) {
	url, stop := startDemo(t, "--seats", "6")
	order := func(seats int, event string) string {
		return fmt.Sprintf(`{"event_id":%q,"customer_email":"ana@example.com","seats":%d,"total_cents":9000,"currency":"EUR"}`, event, seats)
	}
	acme := map[string]string{"Idempotency-Key": "order-1", "X-Tenant-ID": "acme", "Content-Type": "application/json"}

	// 400: missing key, malformed key, invalid body, invalid tenant.
	if r := call(t, "POST", url+"/orders", map[string]string{"X-Tenant-ID": "acme"}, order(2, "concert-1")); r.status != 400 {
		t.Fatalf("missing key: %d %s", r.status, r.body)
	} else {
		problemType(t, r)
	}
	if r := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": "", "X-Tenant-ID": "acme"}, order(2, "concert-1")); r.status != 400 {
		t.Fatalf("empty key: %d %s", r.status, r.body)
	}
	for _, bad := range []string{`{"event_id":"concert-1"}`, order(11, "concert-1"), order(0, "concert-1"), `{"event_id":"c","customer_email":"x","seats":1,"total_cents":1,"currency":"EUR"}`,
		`{"event_id":"c","customer_email":"a@b.co","seats":1,"total_cents":0,"currency":"EUR"}`, `{"event_id":"c","customer_email":"a@b.co","seats":1,"total_cents":1,"currency":"EURO"}`, `not json`} {
		r := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": fmt.Sprintf("bad-%d", len(bad)), "X-Tenant-ID": "acme"}, bad)
		if r.status != 400 || problemType(t, r) != boxoffice.ProblemInvalidRequest {
			t.Fatalf("body %s: %d %s", bad, r.status, r.body)
		}
	}
	if r := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": "t", "X-Tenant-ID": "not a tenant!"}, order(1, "concert-1")); r.status != 400 || problemType(t, r) != boxoffice.ProblemInvalidTenant {
		t.Fatalf("bad tenant: %d %s", r.status, r.body)
	}

	// 201, then a replay of the same response.
	first := call(t, "POST", url+"/orders", acme, order(2, "concert-1"))
	if first.status != 201 || first.header.Get("Location") == "" {
		t.Fatalf("create: %d %s", first.status, first.body)
	}
	var o map[string]any
	if err := json.Unmarshal(first.body, &o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"order_id", "tenant", "event_id", "customer_email", "seats", "total_cents", "currency", "status", "created_at"} {
		if _, ok := o[f]; !ok {
			t.Fatalf("order JSON misses %q: %s", f, first.body)
		}
	}
	if o["tenant"] != "acme" || first.header.Get("Location") != "/orders/"+o["order_id"].(string) {
		t.Fatalf("order %s, Location %s", first.body, first.header.Get("Location"))
	}
	again := call(t, "POST", url+"/orders", acme, " "+order(2, "concert-1")+"\n")
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay: %d %v %s", again.status, again.header, again.body)
	}
	// 422: same key, another payload.
	if r := call(t, "POST", url+"/orders", acme, order(3, "concert-1")); r.status != 422 {
		t.Fatalf("reuse: %d %s", r.status, r.body)
	} else {
		problemType(t, r)
	}
	// Tenant isolation: the same key for another tenant is another order;
	// tenant B cannot read tenant A's order.
	globex := map[string]string{"Idempotency-Key": "order-1", "X-Tenant-ID": "globex"}
	b := call(t, "POST", url+"/orders", globex, order(1, "concert-1"))
	if b.status != 201 || b.header.Get("Idempotent-Replayed") != "" || bytes.Equal(b.body, first.body) {
		t.Fatalf("tenant B: %d %s", b.status, b.body)
	}
	loc := first.header.Get("Location")
	if r := call(t, "GET", url+loc, map[string]string{"X-Tenant-ID": "globex"}, ""); r.status != 404 {
		t.Fatalf("tenant B reads A's order: %d", r.status)
	}
	if r := call(t, "GET", url+loc, map[string]string{"X-Tenant-ID": "acme"}, ""); r.status != 200 {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", url+loc, nil, ""); r.status != 404 {
		t.Fatalf("public tenant reads acme's order: %d", r.status)
	}
	// Sold out (6 seats: 2 + 1 taken): 409 with its own type, not stored.
	if r := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": "big"}, order(4, "concert-1")); r.status != 409 || problemType(t, r) != boxoffice.ProblemSoldOut {
		t.Fatalf("sold out: %d %s", r.status, r.body)
	}

	// Signed payment webhook: 2xx once, replays 2xx, a bad signature 401.
	signer, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	pay := func(id string, sign bool) int {
		body := fmt.Sprintf(`{"type":"payment.succeeded","data":{"order_id":%q}}`, o["order_id"])
		req, _ := http.NewRequest("POST", url+"/webhooks/payments", strings.NewReader(body))
		if sign {
			if err := signer.Sign(req.Header, webhook.Delivery{ID: id}, []byte(body)); err != nil {
				t.Fatal(err)
			}
		} else {
			req.Header.Set("webhook-id", id)
			req.Header.Set("webhook-timestamp", fmt.Sprint(time.Now().Unix()))
			req.Header.Set("webhook-signature", "v1,Zm9yZ2Vk")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := pay("msg_forged", false); s != 401 {
		t.Fatalf("forged webhook: %d", s)
	}
	if s := pay("msg_1", true); s/100 != 2 {
		t.Fatalf("webhook: %d", s)
	}
	for range 3 {
		if s := pay("msg_1", true); s/100 != 2 {
			t.Fatalf("webhook replay: %d", s)
		}
	}
	if r := call(t, "GET", url+loc, map[string]string{"X-Tenant-ID": "acme"}, ""); !strings.Contains(string(r.body), `"status":"paid"`) {
		t.Fatalf("order not paid: %s", r.body)
	}

	// /stats converges to what was sent: 2 orders, 2 invoices, 2 e-mails
	// sent once each, 1 payment.
	var st boxoffice.Stats
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := call(t, "GET", url+"/stats", nil, "")
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatalf("%v: %s", err, r.body)
		}
		if st.Orders == 2 && st.Invoices == 2 && st.EmailsSent == 2 && st.Notifications == 2 && st.EventsPublished == 2 &&
			st.SeatsLeft["concert-1"] == 3 { // the search projection is a consumer too: eventually consistent
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats did not converge: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Payments != 1 || st.EmailsScheduled != 2 || st.SeatsLeft["concert-1"] != 3 || st.DeadLetters != 0 ||
		st.DuplicatesSuppressed["http"] != 1 || st.DuplicatesSuppressed["webhook"] != 3 || st.ProviderCalls < 2 {
		t.Fatalf("stats: %+v", st)
	}
	if r := call(t, "GET", url+"/metrics", nil, ""); r.status != 200 || !strings.Contains(string(r.body), "idem_duplicates_suppressed_total") {
		t.Fatalf("metrics: %d", r.status)
	}
	if r := call(t, "GET", url+"/healthz", nil, ""); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
	if err := stop(); err != nil {
		t.Fatalf("demo shutdown: %v", err)
	}
}

func TestDemoUsage(t *testing.T) {
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
	if code := run(context.Background(), env, []string{"demo", "--webhook-secret", "nope", "--data", filepath.Join(t.TempDir(), "d")}); code != 2 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}
