package effect

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/obs"
)

// The values of the idem.outcome attribute of an idem.effect.call span.
const (
	outcomeCompleted = "completed" // the provider answered; the result is recorded
	outcomeRetry     = "retry"     // a transient failure; the effect is called again later
	outcomeFailed    = "failed"    // a permanent failure or the last attempt
	outcomeReleased  = "released"  // the worker stopped mid-call; handed back, attempt not counted
)

// kindInline is the idem.effect.kind of a call guarded by Ledger.Do.
const kindInline = "inline"

// startCall opens the idem.effect.call span of one call of e with tr (a
// child of the span in ctx) and returns the call's context: it carries the span and
// the effect key for idemhttp.Transport, so the provider request gets
// Idempotency-Key = e.Key and the span's traceparent.
func startCall(ctx context.Context, tr trace.Tracer, e Effect) (context.Context, trace.Span) {
	ctx, span := tr.Start(ctx, obs.SpanEffectCall, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		kind := e.Kind
		if kind == "" {
			kind = kindInline
		}
		span.SetAttributes(obs.AttrEffectKind.String(kind), obs.AttrEffectKey.String(obs.Hash(e.Key)),
			obs.AttrAttempt.Int(e.Attempts))
	}
	return obs.WithKey(ctx, e.Key), span
}

// endCall records the outcome of a call and ends its span.
func endCall(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(obs.AttrOutcome.String(outcome))
	}
	obs.End(span, err)
}
