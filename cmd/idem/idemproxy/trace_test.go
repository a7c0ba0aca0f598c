package idemproxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// The upstream gets the client's Idempotency-Key unchanged and a
// traceparent continuing the proxy's idem.http span.
func TestProxyForwardsKeyAndTrace(t *testing.T) {
	var (
		mu  sync.Mutex
		got http.Header
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(201)
	}))
	defer up.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}, TracerProvider: tp})
	wantStatus(t, send(t, p.URL, call{key: "tr-1", tenant: "acme", body: `{}`}), 201)
	mu.Lock()
	defer mu.Unlock()
	if k := got.Get("Idempotency-Key"); k != `"tr-1"` {
		t.Fatalf("upstream Idempotency-Key %q, want the client's \"tr-1\"", k)
	}
	spans := rec.Ended()
	if len(spans) == 0 {
		t.Fatal("no idem.http span")
	}
	tid := spans[0].SpanContext().TraceID().String()
	if tp := got.Get("Traceparent"); !strings.Contains(tp, tid) {
		t.Fatalf("upstream traceparent %q, want trace %s", tp, tid)
	}
}

// Requests no route matches reach the upstream as they came: an unclean
// path is not redirected, another method on a route's path is not 405.
func TestProxyPassesOtherRequestsThrough(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.RawPath+"|"+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(204)
	}))
	defer up.Close()
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path string }{{"GET", "/a//b/../c"}, {"PUT", "/orders"}, {"DELETE", "/orders"}} {
		req, _ := http.NewRequest(c.method, p.URL+c.path, nil)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			t.Fatalf("%s %s: status %d, want the upstream's 204", c.method, c.path, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 3 || !strings.HasSuffix(paths[0], "|/a//b/../c") {
		t.Fatalf("upstream saw %q", paths)
	}
}

// An unclean path that names a route once cleaned is redirected, not
// forwarded past the route's contract.
func TestProxyRedirectsUncleanRoutePath(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	defer up.Close()
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"//orders", "/x/../orders"} {
		resp, err := noRedirect.Post(p.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/orders" {
			t.Fatalf("POST %s: %d Location %q, want a redirect to /orders", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}
