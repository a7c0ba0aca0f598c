package obs

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys joining log records to traces.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so every record logged with a context holding a
// valid span context carries trace_id and span_id (hex, as trace backends
// show them). Records without a span are passed on unchanged. Wrapping an
// already wrapped handler returns it as is.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

// Logger returns l with its handler wrapped by LogHandler (nil stays nil).
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	h := l.Handler()
	if _, ok := h.(logHandler); ok || h == slog.DiscardHandler {
		return l
	}
	return slog.New(logHandler{h})
}

type logHandler struct{ h slog.Handler }

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.h.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler { return logHandler{l.h.WithAttrs(as)} }

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.h.WithGroup(name)} }

// Component returns the logger a component of idem logs with: l (a nil l
// discards: a Config whose Logger defaults to slog.Default() sets it
// before), its handler joined to traces as by [Logger], with the
// "component" attribute set to name and attrs added.
func Component(l *slog.Logger, name string, attrs ...any) *slog.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return Logger(l).With(append([]any{"component", name}, attrs...)...)
}
