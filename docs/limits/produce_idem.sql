BEGIN;
INSERT INTO biz (tenant, email, seats, total) VALUES ('acme', 'ana@example.com', 2, 9000);
INSERT INTO outbox (source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload, created_at, traceparent, tracestate) VALUES ('idem', lpad(nextval('event_ids')::text, 36, '0'), 'bench.order.created', 'orders', '', 1, '', '', '{"order_id":"o-1"}', '\x7b226f72646572223a317d', 1, '', '') ON CONFLICT (source, event_id) DO NOTHING RETURNING source, event_id, seq;
COMMIT;
