package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// stdoutSpan is the part of a stdouttrace JSON line the tests read.
type stdoutSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

func (s stdoutSpan) attr(k string) any {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value.Value
		}
	}
	return nil
}

func readSpans(t *testing.T, path string) []stdoutSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []stdoutSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s stdoutSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("trace file line is not one JSON span: %v: %.200s", err, sc.Text())
		}
		out = append(out, s)
	}
	return out
}

// "idem demo --trace-file FILE" writes one JSON span per line; one order
// is one trace holding every hop, from idem.http to idem.effect.call.
func TestDemoTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	url, stop := startDemo(t, "--trace-file", path)
	r := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": "trace-1", "X-Tenant-ID": "acme", "Content-Type": "application/json"},
		`{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`)
	if r.status != 201 {
		t.Fatalf("POST /orders: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := call(t, "GET", url+"/stats", nil, "")
		var m map[string]any
		_ = json.Unmarshal(s.body, &m)
		if m["emails_sent"] == 1.0 && m["invoices"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order not processed: %s", s.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stopping ends the components (each ends its spans before it
	// returns), then flushes the exporter.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	spans := readSpans(t, path)
	var order string
	for _, s := range spans {
		if s.Name == "idem.http" && s.attr("idem.decision") == "executed" {
			order = s.SpanContext.TraceID
		}
	}
	if order == "" {
		t.Fatalf("no executed idem.http span among %d", len(spans))
	}
	got := map[string]int{}
	for _, s := range spans {
		if s.SpanContext.TraceID == order {
			got[s.Name]++
		}
	}
	for _, name := range []string{"idem.http", "idem.outbox.enqueue", "idem.relay.publish", "idem.effect.call"} {
		if got[name] == 0 {
			t.Errorf("no %s span in the order's trace: %v", name, got)
		}
	}
	if got["idem.consume"] < 3 {
		t.Errorf("%d idem.consume spans in the order's trace, want 3 (notification, billing, search): %v", got["idem.consume"], got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trace file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

// "idem demo --otlp URL" exports over OTLP/HTTP: the collector receives
// protobuf batches on /v1/traces.
func TestDemoOTLP(t *testing.T) {
	var mu sync.Mutex
	var posts []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+strconv.Itoa(len(body)))
		mu.Unlock()
	}))
	defer collector.Close()
	url, stop := startDemo(t, "--otlp", collector.URL)
	r := call(t, "POST", url+"/orders", map[string]string{"Idempotency-Key": "otlp-1", "X-Tenant-ID": "acme", "Content-Type": "application/json"},
		`{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`)
	if r.status != 201 {
		t.Fatalf("POST /orders: %d %s", r.status, r.body)
	}
	if err := stop(); err != nil { // flushes the batch
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) == 0 {
		t.Fatal("the collector received nothing")
	}
	for _, p := range posts {
		if !strings.HasPrefix(p, "POST /v1/traces application/x-protobuf ") || strings.HasSuffix(p, " 0") {
			t.Errorf("collector got %q", p)
		}
	}
}

// A malformed --otlp URL is a usage error, before anything starts.
func TestTraceFlagsUsage(t *testing.T) {
	for _, bad := range []string{"ftp://collector:4318", "collector:4318", "http://"} {
		err := runDemo(t.Context(), &Env{Stdout: os.Stderr, Stderr: os.Stderr, Getenv: func(string) string { return "" }},
			[]string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--webhook-secret", testSecret, "--otlp", bad})
		if !errors.Is(err, errUsage) {
			t.Errorf("--otlp %q: %v, want a usage error", bad, err)
		}
	}
	code, _, stderr := drillCmd(t, "--otlp", "ftp://x", "--scenario", "lost-response", "--orders", "20")
	if code != 2 {
		t.Errorf("drill --otlp ftp://x: exit %d, stderr %s", code, stderr)
	}
}

// "idem drill --trace-file FILE" traces the systems the drill runs.
func TestDrillTraceFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a drill scenario")
	}
	path := filepath.Join(t.TempDir(), "drill.jsonl")
	code, stdout, stderr := drillCmd(t, "--trace-file", path, "--scenario", "lost-response", "--orders", "20", "--workers", "2")
	if code != 0 {
		t.Fatalf("drill: exit %d\n%s\n%s", code, stdout, stderr)
	}
	n := map[string]int{}
	for _, s := range readSpans(t, path) {
		n[s.Name]++
	}
	if n["idem.http"] == 0 || n["idem.consume"] == 0 || n["idem.relay.publish"] == 0 {
		t.Errorf("drill trace file holds %v", n)
	}
}
