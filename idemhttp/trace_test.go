package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/obs/spantest"
	"github.com/idemkit/idem/internal/testdb"
)

func spanAttr(s *spantest.Span, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// One idem.http span per keyed request, with the decision the middleware
// took, the scope, and a hash of the key instead of the key; the client's
// traceparent makes it a child of the client's span.
func TestSpanDecisions(t *testing.T) {
	rec := spantest.NewRecorder()
	d := testdb.SQLite(t)
	mw, err := idemhttp.New(d, idemhttp.Config{TracerProvider: rec,
		Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	var inHandler trace.SpanContext
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
	}))
	const clientTrace = "0af7651916cd43dd8448eb211c80319c"
	post := func(key, body string, traced bool) int {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		r.Header.Set("X-Tenant", "acme")
		if key != "" {
			r.Header.Set(idemhttp.HeaderKey, key)
		}
		if traced {
			r.Header.Set("traceparent", "00-"+clientTrace+"-b7ad6b7169203331-01")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	codes := []int{
		post("secret-key-1", `{"a":1}`, true),  // executed
		post("secret-key-1", `{"a":1}`, false), // replayed
		post("secret-key-1", `{"a":2}`, false), // mismatch
		post("", `{}`, false),                  // rejected: key missing
		post(`"bad`, `{}`, false),              // rejected: malformed
	}
	if want := []int{201, 201, 422, 400, 400}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	for i, want := range []string{"executed", "replayed", "mismatch", "rejected", "rejected"} {
		s := spans[i]
		if s.Name() != "idem.http" {
			t.Errorf("span %d named %q", i, s.Name())
		}
		if got := spanAttr(s, "idem.decision"); got != want {
			t.Errorf("span %d: idem.decision = %q, want %q", i, got, want)
		}
	}
	first := spans[0]
	if first.SpanContext().TraceID().String() != clientTrace || first.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("executed span not a child of the client's traceparent: trace %s parent %s",
			first.SpanContext().TraceID(), first.Parent().SpanID())
	}
	if inHandler.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("the handler's context does not hold the idem.http span")
	}
	if spanAttr(first, "idem.tenant") != "acme" || spanAttr(first, "idem.operation") != "POST /orders" {
		t.Errorf("scope attributes: tenant %q operation %q", spanAttr(first, "idem.tenant"), spanAttr(first, "idem.operation"))
	}
	hash := spanAttr(first, "idem.key_hash")
	if len(hash) != 32 || idemhttp.DownstreamKey("acme", "POST /orders", "secret-key-1") != "idem-"+hash {
		t.Errorf("idem.key_hash %q is not the scope hash", hash)
	}
	if spanAttr(spans[1], "idem.key_hash") != hash {
		t.Errorf("the replay's key hash differs from the execution's")
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), "secret-key-1") {
				t.Errorf("span %s carries the raw key in %s", s.Name(), kv.Key)
			}
		}
	}
	if spans[1].SpanContext().TraceID().String() == clientTrace {
		t.Errorf("an untraced request joined the client's trace")
	}
}

// The key of the request being executed travels to downstream calls made
// through idemhttp.Transport: the same DownstreamKey on every retry of the
// request, a caller-set key left alone, nothing on safe methods, and the
// traceparent of the request's span.
func TestTransportCarriesKey(t *testing.T) {
	type seen struct{ key, traceparent string }
	got := make(chan seen, 8)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get(idemhttp.HeaderKey), r.Header.Get("traceparent")}
	}))
	defer down.Close()
	client := &http.Client{Transport: &idemhttp.Transport{}}

	rec := spantest.NewRecorder()
	mw, err := idemhttp.New(testdb.SQLite(t), idemhttp.Config{TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range []string{http.MethodPost, http.MethodGet} {
			req, _ := http.NewRequestWithContext(r.Context(), m, down.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				continue
			}
			resp.Body.Close()
		}
		// A caller's own key wins.
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, down.URL, nil)
		req.Header.Set(idemhttp.HeaderKey, "mine")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		w.WriteHeader(http.StatusServiceUnavailable) // not stored: the retry executes again
	}))
	want := idemhttp.DownstreamKey("", "POST /pay", "k-1")
	for run := range 2 {
		r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{}`))
		r.Header.Set(idemhttp.HeaderKey, "k-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
		post, get, own := <-got, <-got, <-got
		if post.key != want {
			t.Errorf("run %d: downstream POST got key %q, want %q", run, post.key, want)
		}
		if get.key != "" {
			t.Errorf("run %d: downstream GET got key %q", run, get.key)
		}
		if own.key != "mine" {
			t.Errorf("run %d: caller's key replaced by %q", run, own.key)
		}
		spans := rec.Ended()
		last := spans[len(spans)-1]
		if !strings.Contains(post.traceparent, last.SpanContext().TraceID().String()) {
			t.Errorf("run %d: downstream traceparent %q not in the request's trace %s", run, post.traceparent, last.SpanContext().TraceID())
		}
	}
	// Outside any request: nothing is set.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, down.URL, nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	if s := <-got; s.key != "" || s.traceparent != "" {
		t.Errorf("a request outside the middleware got key %q traceparent %q", s.key, s.traceparent)
	}
	// WithKey carries an explicit key (an effect's).
	req, _ = http.NewRequestWithContext(idemhttp.WithKey(context.Background(), `effect:"1"`), http.MethodPost, down.URL, nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	s := <-got
	if k, err := idemhttp.ParseKeyValue(s.key); err != nil || k != `effect:"1"` {
		t.Errorf("WithKey: downstream got %q (%v)", s.key, err)
	}
}

// A request that finds its key owned by a running execution is an
// idem.http span with decision in_flight.
func TestSpanDecisionInFlight(t *testing.T) {
	rec := spantest.NewRecorder()
	mw, err := idemhttp.New(testdb.SQLite(t), idemhttp.Config{TracerProvider: rec, Mode: idemhttp.TwoPhase})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() int {
		r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{}`))
		r.Header.Set(idemhttp.HeaderKey, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	first := make(chan int, 1)
	go func() { first <- post() }()
	<-entered
	if code := post(); code != http.StatusConflict {
		t.Fatalf("concurrent duplicate: %d, want 409", code)
	}
	close(release)
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("first: %d", code)
	}
	spans := rec.Ended()
	if len(spans) != 2 || spanAttr(spans[0], "idem.decision") != "in_flight" || spanAttr(spans[1], "idem.decision") != "executed" {
		var got []string
		for _, s := range spans {
			got = append(got, spanAttr(s, "idem.decision"))
		}
		t.Fatalf("decisions %v, want [in_flight executed]", got)
	}
}
