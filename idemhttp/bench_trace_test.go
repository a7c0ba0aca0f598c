package idemhttp_test

import (
	"os"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// IDEM_BENCH_TRACING=1 runs the benchmarks with tracing on: an SDK tracer
// provider sampling every span, installed globally (the middleware's
// default), exporting through a batcher to a no-op exporter. It measures
// what the idem.http span costs; unset, the spans are the API's no-ops.
//
//	IDEM_TEST_POSTGRES_URL=… IDEM_BENCH_TRACING=1 go test -run '^$' -bench . -benchtime 2s ./idemhttp
func init() {
	if os.Getenv("IDEM_BENCH_TRACING") == "1" {
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter())))
	}
}
