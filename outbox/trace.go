package outbox

import (
	"context"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/obs"
)

// startSpans opens one idem.relay.publish span per event, each a child of
// the trace context stored with its row, and injects the span's context
// into the message's headers (the consumer's idem.consume span is its
// child). Without a stored context the span is a root (or, without an
// SDK, nothing is injected).
func (r *Relay[TTx]) startSpans(ctx context.Context, evs []Event, msgs []idem.Message) []trace.Span {
	spans := make([]trace.Span, len(evs))
	for i, e := range evs {
		pctx := obs.FromRow(ctx, e.TraceParent, e.TraceState)
		sctx, span := r.tr.Start(pctx, obs.SpanRelayPublish, trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() {
			span.SetAttributes(obs.AttrMessageID.String(e.ID), obs.AttrSource.String(e.Source), obs.AttrTopic.String(e.Topic))
		}
		if i < len(msgs) {
			if msgs[i].Headers == nil {
				msgs[i].Headers = map[string]string{}
			}
			obs.Inject(sctx, msgs[i].Headers)
		}
		spans[i] = span
	}
	return spans
}

// errNotAcked ends the span of an event the broker did not acknowledge in
// a batch that failed on another event.
var errNotAcked = errors.New("outbox: not acknowledged by the broker")

// endSpans ends the spans of startSpans: the first n events were accepted
// (dups among them were already stored by the broker), the rest failed.
func endSpans(spans []trace.Span, evs []Event, n int, dups []Event, err error) {
	for i, span := range spans {
		outcome, serr := "published", error(nil)
		switch {
		case i >= n:
			outcome, serr = "failed", err
			if serr == nil {
				serr = errNotAcked
			}
		case slices.ContainsFunc(dups, func(d Event) bool { return d.Seq == evs[i].Seq }):
			outcome = "duplicate"
		}
		if span.IsRecording() {
			span.SetAttributes(obs.AttrOutcome.String(outcome))
		}
		obs.End(span, serr)
	}
}
