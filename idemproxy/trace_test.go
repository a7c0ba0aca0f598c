package idemproxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemproxy"
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
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idemhttp.ReExecute)}, TracerProvider: tp})
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
