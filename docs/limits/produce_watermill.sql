BEGIN;
INSERT INTO biz (tenant, email, seats, total) VALUES ('acme', 'ana@example.com', 2, 9000);
INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text, '{"order":1}', '{"order_id":"o-1"}', pg_current_xact_id());
COMMIT;
