package idemhttp

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/obs"
)

// The values of the idem.decision attribute of the idem.http span.
const (
	decisionExecuted = "executed"  // the handler ran for this request
	decisionReplayed = "replayed"  // a stored response was replayed
	decisionMismatch = "mismatch"  // the key was reused with another request (422)
	decisionInFlight = "in_flight" // another execution owns the key (409)
	// decisionRejected: the middleware answered without running the
	// handler or replaying: key missing or malformed, tenant or operation
	// refused, body too large, key held for reconciliation, or the store
	// failing (503, the span's status is then Error).
	decisionRejected = "rejected"
)

// serverSpan are the start options of every idem.http span, built once.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// startSpan opens the idem.http span for r: a child of the span already in
// r's context (an otelhttp handler in front) or else of the traceparent the
// client sent, a root span otherwise.
func (m *Middleware[TTx]) startSpan(r *http.Request) (*http.Request, trace.Span) {
	ctx := obs.ExtractHTTP(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := m.tr.Start(ctx, obs.SpanHTTP, serverSpan...)
	if !span.IsRecording() && !span.SpanContext().IsValid() {
		return r, span // tracing off and no trace to continue: keep the request as is
	}
	return r.WithContext(ctx), span
}

// endSpan records the decision and scope on span and ends it. Attributes
// are computed only for a recording span.
func endSpan(span trace.Span, decision string, sc scope, err error) {
	if span.IsRecording() {
		attrs := []attribute.KeyValue{obs.AttrDecision.String(decision)}
		if sc.key != "" {
			attrs = append(attrs, obs.AttrTenant.String(sc.tenant), obs.AttrOperation.String(sc.operation),
				obs.AttrKeyHash.String(obs.Hash(sc.tenant, sc.operation, sc.key)))
		}
		span.SetAttributes(attrs...)
	}
	obs.End(span, err)
}

// DownstreamKey is the idempotency key the middleware carries downstream
// for a request with key in tenant's scope of operation: "idem-" and 32 hex
// digits of a SHA-256 over the three, the same hash the idem.http span
// records as idem.key_hash. It is stable across retries of the request and
// differs between tenants and operations, so two operations reusing one
// client key never collide in the service they both call.
func DownstreamKey(tenant, operation, key string) string {
	return "idem-" + obs.Hash(tenant, operation, key)
}

// WithKey returns ctx carrying key as the idempotency key that [Transport]
// sets on outgoing requests made with it; it takes precedence over the key
// of the request the middleware is executing. The effect ledger does this
// with the effect key around a provider call.
func WithKey(ctx context.Context, key string) context.Context { return obs.WithKey(ctx, key) }

// CarriedKey returns the idempotency key ctx carries downstream: the one
// set by [WithKey], else, inside a handler the middleware executes,
// [DownstreamKey] of the request's tenant, operation and key (computed on
// demand), else "".
func CarriedKey(ctx context.Context) string {
	if k := obs.Key(ctx); k != "" {
		return k
	}
	if s := stateFrom(ctx); s != nil && s.key != "" {
		return DownstreamKey(s.tenant, s.operation, s.key)
	}
	return ""
}

// Transport is an http.RoundTripper that carries the caller's intent
// downstream: on a request whose context carries a key ([CarriedKey]: the
// request the middleware executes, or an effect's key set by the effect
// ledger around its call) and that has no Idempotency-Key yet, it sets that key,
// so a handler's call to another idem-protected service or to a provider
// is deduplicated there when the handler runs again for the same request.
// Safe methods (GET, HEAD, OPTIONS, TRACE) are sent unchanged, and so is a
// key that is not 1 to 255 visible ASCII characters. It also injects the
// W3C traceparent of the span in the context when the request has none.
// The request is cloned before any header is set.
type Transport struct {
	// Base sends the requests. Defaults to http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	key := CarriedKey(ctx)
	setKey := key != "" && !isSafe(req.Method) && len(req.Header.Values(HeaderKey)) == 0 && checkKey(key) == nil
	setTrace := trace.SpanContextFromContext(ctx).IsValid() && req.Header.Get(obs.HeaderTraceparent) == ""
	if !setKey && !setTrace {
		return base.RoundTrip(req)
	}
	out := req.Clone(ctx)
	if setKey {
		out.Header.Set(HeaderKey, quoteKey(key))
	}
	if setTrace {
		obs.Propagator.Inject(ctx, propagation.HeaderCarrier(out.Header))
	}
	return base.RoundTrip(out)
}

// quoteKey writes key as a bare token (what Stripe-style providers read)
// unless it holds a quote; then as the draft's structured-field string
// ("…", with \" and \\ escaped). ParseKey reads either back as key.
func quoteKey(key string) string {
	if !strings.Contains(key, `"`) {
		return key
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}
