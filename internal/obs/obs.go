// Package obs holds what idem's packages share for OpenTelemetry tracing
// and for carrying an operation's identity downstream: the tracer lookup,
// the span and attribute names (an interface: dashboards and tests key on
// them), the W3C trace-context propagation into message headers and table
// rows, and the context values that carry an idempotency key and a
// causing message id to downstream calls.
//
// It depends on the OpenTelemetry API only (go.opentelemetry.io/otel,
// otel/trace, otel/propagation, otel/attribute, otel/codes), never on the
// SDK or an exporter: with no tracer provider installed every span is the
// API's non-recording span and attributes are not even computed.
package obs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every idem span.
const ScopeName = "github.com/idemkit/idem"

// Span names.
const (
	SpanHTTP          = "idem.http"
	SpanOutboxEnqueue = "idem.outbox.enqueue"
	SpanRelayPublish  = "idem.relay.publish"
	SpanConsume       = "idem.consume"
	SpanEffectCall    = "idem.effect.call"
	SpanWebhook       = "idem.webhook"
)

// Attribute keys.
const (
	AttrDecision    = attribute.Key("idem.decision")
	AttrTenant      = attribute.Key("idem.tenant")
	AttrOperation   = attribute.Key("idem.operation")
	AttrKeyHash     = attribute.Key("idem.key_hash")
	AttrConsumer    = attribute.Key("idem.consumer")
	AttrMessageID   = attribute.Key("idem.message_id")
	AttrAttempt     = attribute.Key("idem.attempt")
	AttrEffectKind  = attribute.Key("idem.effect.kind")
	AttrEffectKey   = attribute.Key("idem.effect.key_hash")
	AttrOutcome     = attribute.Key("idem.outcome")
	AttrEventID     = attribute.Key("idem.event_id")
	AttrEventCount  = attribute.Key("idem.events")
	AttrTopic       = attribute.Key("idem.topic")
	AttrSource      = attribute.Key("idem.source")
	AttrDeliveryID  = attribute.Key("idem.delivery_id")
	AttrCausation   = attribute.Key("idem.causation")
	AttrWebhookType = attribute.Key("idem.webhook.provider")
)

// Header names used on broker messages.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
	// HeaderCausation carries the id of the message whose handling
	// enqueued this one.
	HeaderCausation = "causation"
)

// Tracer returns idem's tracer from tp, or from the global provider
// (otel.GetTracerProvider, which follows a later otel.SetTracerProvider)
// when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Propagator is the W3C trace-context propagator idem uses for headers and
// rows, whatever global propagator the application installed: the rows
// and broker headers hold traceparent/tracestate by contract.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Hash returns a short, stable hex digest of parts (SHA-256, first 16
// bytes), for attributes that must identify a key without revealing it.
func Hash(parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// Inject writes the span context of ctx into headers (traceparent,
// tracestate) when it is valid. headers must not be nil.
func Inject(ctx context.Context, headers map[string]string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	Propagator.Inject(ctx, propagation.MapCarrier(headers))
}

// Extract returns ctx with the remote span context found in headers, or
// ctx unchanged when there is none.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	if headers[HeaderTraceparent] == "" {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier(headers))
}

// ExtractHTTP is Extract from HTTP headers, used only when ctx has no
// span yet (an otelhttp handler in front already extracted it).
func ExtractHTTP(ctx context.Context, h propagation.HeaderCarrier) context.Context {
	// Indexed by the canonical name: Get would canonicalize (allocate) on
	// every request.
	if trace.SpanContextFromContext(ctx).IsValid() || len(h["Traceparent"]) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, h)
}

// Current returns the W3C traceparent and tracestate of the span in ctx,
// or "" when there is no valid span context (to store in a row).
func Current(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	m := propagation.MapCarrier{}
	Propagator.Inject(ctx, m)
	return m[HeaderTraceparent], m[HeaderTracestate]
}

// FromRow returns ctx with the remote span context stored in a row
// (traceparent, tracestate), or ctx unchanged when traceparent is empty.
func FromRow(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	m := propagation.MapCarrier{HeaderTraceparent: traceparent}
	if tracestate != "" {
		m[HeaderTracestate] = tracestate
	}
	return Propagator.Extract(ctx, m)
}

// End ends span with err: an error status and the recorded error when err
// is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

type keyCtx struct{}

// WithKey returns ctx carrying key as the idempotency key of downstream
// calls made while handling it.
func WithKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, keyCtx{}, key)
}

// Key returns the idempotency key carried by ctx, or "".
func Key(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(string)
	return k
}

type causationCtx struct{}

// WithCausation returns ctx carrying the id of the message being handled,
// copied by the outbox into the causation header of the events it
// enqueues.
func WithCausation(ctx context.Context, messageID string) context.Context {
	if messageID == "" {
		return ctx
	}
	return context.WithValue(ctx, causationCtx{}, messageID)
}

// Causation returns the causing message id carried by ctx, or "".
func Causation(ctx context.Context) string {
	id, _ := ctx.Value(causationCtx{}).(string)
	return id
}
