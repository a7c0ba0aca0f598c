package obs

import (
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
