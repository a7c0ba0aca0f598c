-- W3C trace context carried by outbox events and scheduled effects. Empty
-- when no span was active.
ALTER TABLE {{t}}outbox ADD COLUMN traceparent LONGBLOB NOT NULL DEFAULT (''), ADD COLUMN tracestate LONGBLOB NOT NULL DEFAULT ('');
ALTER TABLE {{t}}effects ADD COLUMN traceparent LONGBLOB NOT NULL DEFAULT (''), ADD COLUMN tracestate LONGBLOB NOT NULL DEFAULT ('');
