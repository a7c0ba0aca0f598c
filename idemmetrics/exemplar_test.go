package idemmetrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"

	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/internal/obs/spantest"
)

// Duplicates and dead letters counted with a sampled span in the context
// carry the trace id as exemplar; without a span, or with an unsampled one
// (a child of a caller's unsampled traceparent), they are plain counts.
func TestExemplarsCarryTraceID(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := spantest.NewRecorder().Tracer("t")
	ctx, span := tr.Start(context.Background(), "consume")
	defer span.End()
	unsampledParent := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"})
	uctx, unsampled := tr.Start(unsampledParent, "consume")
	defer unsampled.End()
	if !span.SpanContext().IsSampled() || !unsampled.SpanContext().IsValid() || unsampled.SpanContext().IsSampled() {
		t.Fatalf("span contexts %+v %+v: want one sampled, one valid and unsampled", span.SpanContext(), unsampled.SpanContext())
	}
	m.DuplicateContext(ctx, "consumer", "billing")
	m.DeadLetteredContext(ctx, "billing", "permanent")
	m.Duplicate("consumer", "search")
	m.DuplicateContext(uctx, "consumer", "audit")
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
		"idem_duplicates_suppressed_total,consumer,audit":   "",
	} {
		if got, ok := seen[label]; !ok || got != w {
			t.Errorf("%s: exemplar trace id %q (present %v), want %q", label, got, ok, w)
		}
	}
}
