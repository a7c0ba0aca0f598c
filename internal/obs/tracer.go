package obs

import (
	"context"
	"log/slog"

	"github.com/idemkit/idem"
)

// Log attribute keys of every log line about a message, so the logs of all
// components can be joined on them (the one log-key vocabulary).
const (
	LogConsumer    = "consumer"
	LogMessageID   = "message_id"
	LogOrderingKey = "ordering_key"
	LogAttempt     = "attempt"
)

// MessageAttrs returns the attributes of msg seen by consumer: consumer,
// message id, ordering key (when set) and attempt. The payload is never
// logged.
func MessageAttrs(consumer string, msg idem.Message) []slog.Attr {
	attrs := []slog.Attr{slog.String(LogConsumer, consumer), slog.String(LogMessageID, msg.ID)}
	if msg.Key != "" {
		attrs = append(attrs, slog.String(LogOrderingKey, msg.Key))
	}
	return append(attrs, slog.Int(LogAttempt, msg.Attempt))
}

// TraceHook is a tracing hook: Start opens a span named name with attrs and
// returns the context carrying it and the function that ends it with the
// operation's error (nil on success). Implementations must be safe for
// concurrent use.
//
// idem's own spans (idem.http, idem.outbox.enqueue, idem.relay.publish,
// idem.consume, idem.effect.call, idem.webhook) use the OpenTelemetry API
// directly, through each component's TracerProvider option (default
// otel.GetTracerProvider()); this hook is an extra span around a
// consumer's handler for tracers that are not OpenTelemetry.
// consumer.Tracer and idemmetrics.Tracer are this type.
type TraceHook interface {
	Start(ctx context.Context, name string, attrs ...slog.Attr) (context.Context, func(err error))
}

// NopTraceHook is a TraceHook that does nothing; the default.
// idemmetrics.NopTracer is this type.
type NopTraceHook struct{}

// Start returns ctx and a no-op end function.
func (NopTraceHook) Start(ctx context.Context, _ string, _ ...slog.Attr) (context.Context, func(error)) {
	return ctx, func(error) {}
}
