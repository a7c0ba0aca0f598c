package boxoffice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/webhook"
)

// TestOneOrderOneTrace: one POST /orders through the whole reference system
// (HTTP → outbox → relay → JetStream → the three consumers → effect
// worker → fake provider) is one trace, and every span's parent is the
// span of the hop its data came from:
//
//	client ─ idem.http ─ idem.outbox.enqueue ─ idem.relay.publish ─┬ idem.consume (notification) ─ idem.effect.call ─▶ provider
//	                                                               ├ idem.consume (billing)
//	                                                               └ idem.consume (search)
//
// A retry of the POST is an idem.http span with decision replayed; a
// payment webhook whose sender propagates the trace joins it as
// idem.webhook.
func TestOneOrderOneTrace(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)

	provider := fakeprovider.New(fakeprovider.Config{})
	if err := provider.Start(); err != nil {
		t.Fatal(err)
	}
	defer provider.Close()
	type call struct{ key, traceparent string }
	var mu sync.Mutex
	var calls []call
	target, _ := url.Parse(provider.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, call{r.Header.Get("Idempotency-Key"), r.Header.Get("traceparent")})
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	sys, err := boxoffice.Open(ctx, boxoffice.Options{DataDir: t.TempDir(), SQLiteSynchronous: "NORMAL",
		Config: boxoffice.Config{WebhookSecrets: []string{testSecret}, PollInterval: 10 * time.Millisecond,
			ProviderURL: front.URL, TracerProvider: tp}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := sys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sys.Handler())
	defer srv.Close()

	client := tp.Tracer("client")
	post := func(ctx context.Context, path string, h http.Header, body []byte) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, bytes.NewReader(body))
		for k, v := range h {
			req.Header[k] = v
		}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	orderHeaders := http.Header{"Idempotency-Key": {"order-k1"}, "Content-Type": {"application/json"}, "X-Tenant-Id": {"acme"}}
	cctx, root := client.Start(ctx, "client POST /orders")
	resp := post(cctx, "/orders", orderHeaders, []byte(orderBody))
	var order boxoffice.Order
	_ = json.NewDecoder(resp.Body).Decode(&order)
	resp.Body.Close()
	root.End()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %d", resp.StatusCode)
	}
	orderTrace := root.SpanContext().TraceID()

	rctx, retry := client.Start(ctx, "client retry")
	resp = post(rctx, "/orders", orderHeaders, []byte(orderBody))
	resp.Body.Close()
	retry.End()
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry was not replayed")
	}

	// The payment provider's webhook, sent with the order's trace context.
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{testSecret}})
	pay, _ := json.Marshal(map[string]any{"type": "payment.succeeded", "data": map[string]string{"order_id": order.OrderID}})
	wh := http.Header{"Content-Type": {"application/json"}}
	if err := std.Sign(wh, webhook.Delivery{ID: "pay-1", Timestamp: time.Now()}, pay); err != nil {
		t.Fatal(err)
	}
	resp = post(cctx, "/webhooks/payments", wh, pay)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}

	attr := func(s sdktrace.ReadOnlySpan, k string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == k {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	inTrace := func() map[string][]sdktrace.ReadOnlySpan {
		out := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == orderTrace {
				out[s.Name()] = append(out[s.Name()], s)
			}
		}
		return out
	}
	consumed := func(spans map[string][]sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
		out := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans["idem.consume"] {
			if attr(s, "idem.decision") == "processed" {
				out[attr(s, "idem.consumer")] = s
			}
		}
		return out
	}
	var spans map[string][]sdktrace.ReadOnlySpan
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans = inTrace()
		if len(consumed(spans)) == 3 && len(spans["idem.effect.call"]) > 0 && len(spans["idem.webhook"]) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trace did not complete: %v", names(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}

	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		if len(spans[name]) != 1 {
			t.Fatalf("%d %s spans in the order's trace, want 1: %v", len(spans[name]), name, names(spans))
		}
		return spans[name][0]
	}
	childOf := func(child, parent sdktrace.ReadOnlySpan) {
		t.Helper()
		if child.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s (%s) is a child of %s, want %s %s", child.Name(), attr(child, "idem.consumer"), child.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
		}
	}
	httpSpan := one("idem.http")
	if root.SpanContext().SpanID() != httpSpan.Parent().SpanID() || attr(httpSpan, "idem.decision") != "executed" {
		t.Errorf("idem.http: parent %s decision %q", httpSpan.Parent().SpanID(), attr(httpSpan, "idem.decision"))
	}
	enq := one("idem.outbox.enqueue")
	childOf(enq, httpSpan)
	pub := one("idem.relay.publish")
	childOf(pub, enq)
	if attr(pub, "idem.outcome") != "published" {
		t.Errorf("publish outcome %q", attr(pub, "idem.outcome"))
	}
	cons := consumed(spans)
	for _, name := range []string{boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch} {
		s, ok := cons[name]
		if !ok {
			t.Fatalf("no processed idem.consume span of %s", name)
		}
		childOf(s, pub)
	}
	var done sdktrace.ReadOnlySpan
	for _, s := range spans["idem.effect.call"] {
		childOf(s, cons[boxoffice.ConsumerNotification])
		if attr(s, "idem.outcome") == "completed" {
			done = s
		}
		if attr(s, "idem.effect.kind") != boxoffice.EffectKindEmail {
			t.Errorf("effect kind %q", attr(s, "idem.effect.kind"))
		}
	}
	if done == nil {
		t.Fatalf("no completed idem.effect.call")
	}
	mu.Lock()
	last := calls[len(calls)-1]
	mu.Unlock()
	if want := "00-" + orderTrace.String() + "-" + done.SpanContext().SpanID().String() + "-01"; last.traceparent != want {
		t.Errorf("provider got traceparent %q, want the effect call's %q", last.traceparent, want)
	}
	if last.key == "" {
		t.Errorf("provider got no Idempotency-Key")
	}
	whSpan := one("idem.webhook")
	if attr(whSpan, "idem.decision") != "accepted" || attr(whSpan, "idem.delivery_id") != "pay-1" {
		t.Errorf("idem.webhook: %v", whSpan.Attributes())
	}

	// The retry: a trace of its own, one idem.http span, replayed.
	var replays int
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == retry.SpanContext().TraceID() && s.Name() == "idem.http" {
			replays++
			if attr(s, "idem.decision") != "replayed" {
				t.Errorf("retry decision %q", attr(s, "idem.decision"))
			}
		}
	}
	if replays != 1 {
		t.Errorf("%d idem.http spans for the retry, want 1", replays)
	}
}

func names(spans map[string][]sdktrace.ReadOnlySpan) map[string]int {
	out := map[string]int{}
	for k, v := range spans {
		out[k] = len(v)
	}
	return out
}
