package idemhttp_test

import (
	"os"

	"go.opentelemetry.io/otel"

	"github.com/idemkit/idem/internal/obs/spantest"
)

// IDEM_BENCH_TRACING=1 runs the benchmarks with tracing on: an in-memory
// recorder sampling and recording every span, installed globally (the
// middleware's default), that forgets spans as they end (as an exporter
// that discards would). It measures what a recorded idem.http span costs
// the middleware; unset, the spans are the API's no-ops. The recorder is
// leaner than the OpenTelemetry SDK (no span processor, batcher or
// limits), so it bounds the SDK's cost from below.
//
//	IDEM_TEST_POSTGRES_URL=… IDEM_BENCH_TRACING=1 go test -run '^$' -bench . -benchtime 2s ./idemhttp
func init() {
	if os.Getenv("IDEM_BENCH_TRACING") == "1" {
		otel.SetTracerProvider(spantest.New(spantest.Options{DropEnded: true}))
	}
}
