-- W3C trace context carried by rows that are picked up later by another
-- process: the outbox event (its relay publishes it as a child of the
-- span that enqueued it) and the scheduled effect (its worker calls the
-- provider as a child of the span that scheduled it). Empty when no span
-- was active.
ALTER TABLE {{t}}outbox ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE {{t}}outbox ADD COLUMN tracestate text NOT NULL DEFAULT '';
ALTER TABLE {{t}}effects ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE {{t}}effects ADD COLUMN tracestate text NOT NULL DEFAULT '';
