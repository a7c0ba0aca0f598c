package idemhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/obs/spantest"
)

// BenchmarkSpan measures the idem.http span alone (start, decision and
// scope attributes, end), without the database work around it: "off" is the
// default global provider with no SDK installed, "noop" the API's no-op
// provider, "recording" an in-memory recorder sampling and recording every
// span and forgetting it at End (the work the middleware asks of any
// recording provider; an SDK adds its span processor and export on top).
func BenchmarkSpan(b *testing.B) {
	recording := spantest.New(spantest.Options{DropEnded: true})
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", nil}, {"noop", noop.NewTracerProvider()}, {"recording", recording}} {
		b.Run(c.name, func(b *testing.B) {
			m := &Middleware[any]{tr: obs.Tracer(c.tp)}
			r := httptest.NewRequest(http.MethodPost, "/orders", nil)
			sc := scope{"acme", "POST /orders", "order-1"}
			b.ReportAllocs()
			for b.Loop() {
				_, span := m.startSpan(r)
				endSpan(span, decisionExecuted, sc, nil)
			}
		})
	}
}
