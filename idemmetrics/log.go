package idemmetrics

import (
	"log/slog"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/obs"
)

// The slog attribute keys idem uses in every log line about a message, so
// logs of all components can be joined on them (the one log-key
// vocabulary; see ARCHITECTURE.md).
const (
	KeyConsumer  = obs.LogConsumer
	KeyMessageID = obs.LogMessageID
	// KeyKey is the ordering key's attribute, "ordering_key" (never a bare
	// "key").
	KeyKey     = obs.LogOrderingKey
	KeyAttempt = obs.LogAttempt
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
// message id, ordering key (when set) and attempt. The payload is never
// logged. The consumer logs these same attributes.
func MessageAttrs(consumer string, msg idem.Message) []slog.Attr {
	return obs.MessageAttrs(consumer, msg)
}
