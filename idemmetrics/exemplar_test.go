package idemmetrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem/idemmetrics"
)

// Duplicates and dead letters counted with a sampled span in the context
// carry the trace id as exemplar; without a span they are plain counts.
func TestExemplarsCarryTraceID(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "consume")
	defer span.End()
	m.DuplicateContext(ctx, "consumer", "billing")
	m.DeadLetteredContext(ctx, "billing", "permanent")
	m.Duplicate("consumer", "search")
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := span.SpanContext().TraceID().String()
	seen := map[string]string{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			c := mt.GetCounter()
			if c == nil || c.GetValue() == 0 {
				continue
			}
			label := f.GetName()
			for _, l := range mt.GetLabel() {
				label += "," + l.GetValue()
			}
			for _, l := range c.GetExemplar().GetLabel() {
				if l.GetName() == idemmetrics.ExemplarTraceID {
					seen[label] = l.GetValue()
				}
			}
			if _, ok := seen[label]; !ok {
				seen[label] = ""
			}
		}
	}
	for label, w := range map[string]string{
		"idem_duplicates_suppressed_total,consumer,billing": want,
		"idem_dead_letters_total,permanent,billing":         want,
		"idem_duplicates_suppressed_total,consumer,search":  "",
	} {
		if got, ok := seen[label]; !ok || got != w {
			t.Errorf("%s: exemplar trace id %q (present %v), want %q", label, got, ok, w)
		}
	}
}
