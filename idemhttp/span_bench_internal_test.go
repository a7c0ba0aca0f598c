package idemhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem/internal/obs"
)

// BenchmarkSpan measures the idem.http span alone (start, decision and
// scope attributes, end), without the database work around it: "off" is the
// default global provider with no SDK installed, "noop" the API's no-op
// provider, "sdk" an SDK provider sampling every span into a batcher with a
// no-op exporter.
func BenchmarkSpan(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer sdk.Shutdown(b.Context())
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"off", nil}, {"noop", noop.NewTracerProvider()}, {"sdk", sdk}} {
		b.Run(c.name, func(b *testing.B) {
			m := &Middleware[any]{tr: obs.Tracer(c.tp)}
			r := httptest.NewRequest(http.MethodPost, "/orders", nil)
			sc := scope{"acme", "POST /orders", "order-1"}
			b.ReportAllocs()
			for b.Loop() {
				_, span := m.startSpan(r)
				endSpan(span, DecisionExecuted, sc, nil)
			}
		})
	}
}
