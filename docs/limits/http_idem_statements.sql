-- An experiment beside http_idem.sql: the same decision as migration 0014's function, sent as two plain
-- statements in one pipeline: the key's lock taken only when no record is there, then the record read
-- again in a statement of its own (its snapshot starts after the grant). The rest is http_idem.sql.
\set k random(1, 2000000000)
\startpipeline
SELECT pg_try_advisory_lock(hashtextextended('acme/POST /orders/k' || :k || '-' || :client_id, 0)) WHERE NOT EXISTS (SELECT 1 FROM keys WHERE tenant='acme' AND operation='POST /orders' AND key = 'k' || :k || '-' || :client_id);
SELECT * FROM keys WHERE tenant='acme' AND operation='POST /orders' AND key = 'k' || :k || '-' || :client_id;
\endpipeline
\startpipeline
BEGIN;
INSERT INTO biz (tenant, email, seats, total) VALUES ('acme', 'ana@example.com', 2, 9000);
\endpipeline
\startpipeline
INSERT INTO keys (tenant, operation, key, fp, state, status, headers, body, created_at, expires_at, completed_at) VALUES ('acme','POST /orders','k' || :k || '-' || :client_id, '\x0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20', 'completed', 201, '{"Content-Type":["application/json"],"Location":["/orders/0192"]}', '{"order_id":"01927c3e-aaaa-bbbb-cccc-123456789abc","status":"confirmed","seats":2,"total_cents":9000}', 1, 2, 3);
COMMIT;
SELECT pg_advisory_unlock(hashtextextended('acme/POST /orders/k' || :k || '-' || :client_id, 0));
\endpipeline
