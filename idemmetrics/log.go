package idemmetrics

import (
	"context"
	"log/slog"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/obs"
)

// The slog attribute keys idem uses in every log line about a message, so
// logs of all components can be joined on them.
const (
	KeyConsumer  = "consumer"
	KeyMessageID = "message_id"
	KeyKey       = "key"
	KeyAttempt   = "attempt"
	// KeyTraceID and KeySpanID join a log record to its trace; see
	// [TraceLogHandler].
	KeyTraceID = obs.LogTraceID
	KeySpanID  = obs.LogSpanID
)

// TraceLogHandler wraps h so every record logged with a context holding an
// active (valid) OpenTelemetry span context carries trace_id and span_id.
// idem's components wrap the loggers they are given this way; use it for
// the application's own loggers so their lines join the same traces.
func TraceLogHandler(h slog.Handler) slog.Handler { return obs.LogHandler(h) }

// Consumer returns the consumer attribute.
func Consumer(name string) slog.Attr { return slog.String(KeyConsumer, name) }

// MessageID returns the message id attribute (the dedup key).
func MessageID(id string) slog.Attr { return slog.String(KeyMessageID, id) }

// Key returns the ordering key attribute.
func Key(k string) slog.Attr { return slog.String(KeyKey, k) }

// Attempt returns the delivery attempt attribute.
func Attempt(n int) slog.Attr { return slog.Int(KeyAttempt, n) }

// MessageAttrs returns the attributes of msg seen by consumer: consumer,
// message id, key (when set) and attempt. The payload is never logged.
func MessageAttrs(consumer string, msg idem.Message) []slog.Attr {
	attrs := []slog.Attr{Consumer(consumer), MessageID(msg.ID)}
	if msg.Key != "" {
		attrs = append(attrs, Key(msg.Key))
	}
	return append(attrs, Attempt(msg.Attempt))
}

// Tracer is a tracing hook: Start opens a span named name with attrs and
// returns the context carrying it and the function that ends it with the
// operation's error (nil on success). Implementations must be safe for
// concurrent use.
//
// idem's own spans (idem.http, idem.outbox.enqueue, idem.relay.publish,
// idem.consume, idem.effect.call, idem.webhook) use the OpenTelemetry API
// directly, through each component's TracerProvider option (default
// otel.GetTracerProvider()); this hook is an extra span around a
// consumer's handler for tracers that are not OpenTelemetry.
type Tracer interface {
	Start(ctx context.Context, name string, attrs ...slog.Attr) (context.Context, func(err error))
}

// NopTracer is a Tracer that does nothing; the default.
type NopTracer struct{}

// Start returns ctx and a no-op end function.
func (NopTracer) Start(ctx context.Context, _ string, _ ...slog.Attr) (context.Context, func(error)) {
	return ctx, func(error) {}
}
