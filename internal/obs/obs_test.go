package obs_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/obs/spantest"
)

// Log records carry trace_id and span_id when a span is active, and
// nothing extra otherwise; wrapping twice adds them once.
func TestLogHandlerJoinsTraces(t *testing.T) {
	var buf bytes.Buffer
	log := obs.Logger(obs.Logger(slog.New(slog.NewTextHandler(&buf, nil)))).With("component", "x")
	ctx, span := spantest.NewRecorder().Tracer("t").Start(context.Background(), "s")
	log.InfoContext(ctx, "inside", "key", "k1")
	span.End()
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	sc := span.SpanContext()
	want := "trace_id=" + sc.TraceID().String() + " span_id=" + sc.SpanID().String()
	if !strings.Contains(lines[0], want) || strings.Count(lines[0], "trace_id=") != 1 || !strings.Contains(lines[0], "key=k1") {
		t.Errorf("inside a span: %q, want %q once", lines[0], want)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("outside a span: %q", lines[1])
	}
	if obs.Logger(slog.New(slog.DiscardHandler)).Handler() != slog.DiscardHandler {
		t.Errorf("a discarding logger was wrapped")
	}
}

// A context stored in a row and read back names the same span; no span,
// nothing stored.
func TestRowRoundTrip(t *testing.T) {
	if tp, ts := obs.Current(context.Background()); tp != "" || ts != "" {
		t.Fatalf("no span: stored %q %q", tp, ts)
	}
	ctx, span := spantest.NewRecorder().Tracer("t").Start(context.Background(), "s")
	defer span.End()
	tp, _ := obs.Current(ctx)
	back := obs.FromRow(context.Background(), tp, "")
	if got := obs.Tracer(noop.NewTracerProvider()); got == nil {
		t.Fatal("nil tracer")
	}
	_, child := spantest.NewRecorder().Tracer("t").Start(back, "child")
	defer child.End()
	if child.SpanContext().TraceID() != span.SpanContext().TraceID() {
		t.Errorf("row context lost the trace: %q", tp)
	}
	if obs.Hash("a", "bc") == obs.Hash("ab", "c") || len(obs.Hash("x")) != 32 {
		t.Errorf("Hash does not separate its parts or has the wrong length")
	}
}
