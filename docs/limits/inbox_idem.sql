\set k random(1, 2000000000)
\startpipeline
BEGIN;
INSERT INTO inbox (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at) VALUES ('billing', 'm-' || :k || '-' || :client_id, '\x0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20', 'completed', 1, 1, 2) ON CONFLICT (consumer, message_id) DO NOTHING;
\endpipeline
INSERT INTO biz (tenant, email, seats, total) VALUES ('acme', 'ana@example.com', 2, 9000);
COMMIT;
