-- Tables for the pgbench models of idem's SQL (a scratch database, not idem's schema): the business
-- table, the HTTP keys and the inbox as idem's migrations leave them, and migration 0014's read-then-lock function.
create table biz (id bigserial primary key, tenant text not null, email text not null, seats int not null, total bigint not null, created_at timestamptz not null default now());
create table keys (tenant text not null, operation text not null, key text not null, fp bytea not null, state text not null, token bigint not null default 1, status int, headers text, body bytea, omitted int not null default 0, resource_type text, resource_id text, created_at bigint not null, locked_until bigint not null default 0, expires_at bigint not null, completed_at bigint, primary key (tenant, operation, key));
create index keys_expires on keys (expires_at);
-- idemhttp's pipelined path on pgx (http_idem.sql): the key's record read and, when there is none, the
-- key's session advisory lock and a second read, in one statement, as idem's migration 0014 creates it.
create function lock_load(p_tenant text, p_operation text, p_key text, p_lock bigint, p_lock_timeout text)
returns setof keys language plpgsql volatile as $$
begin
    return query select * from keys where tenant = p_tenant and operation = p_operation and key = p_key;
    if found then
        return;
    end if;
    if not pg_try_advisory_lock(p_lock) then
        perform set_config('lock_timeout', p_lock_timeout, true);
        perform pg_advisory_lock(p_lock);
    end if;
    begin
        return query select * from keys where tenant = p_tenant and operation = p_operation and key = p_key;
    exception when others or query_canceled then
        perform pg_advisory_unlock(p_lock);
        raise;
    end;
    if found then
        perform pg_advisory_unlock(p_lock);
    end if;
end
$$;
-- idem's inbox (inbox_idem.sql): one row per (consumer, message id), as idem's migrations 0001, 0010 and 0011 leave it.
create table inbox (consumer text not null, message_id text not null, fingerprint bytea not null, state text not null default 'completed' check (state in ('in_progress', 'completed', 'failed')), token bigint not null default 1, attempts integer not null default 1, lease_until bigint not null default 0, received_at bigint not null, processed_at bigint not null default 0, expires_at bigint not null, primary key (consumer, message_id));
create index inbox_expires_idx on inbox using brin (expires_at);
create index inbox_in_progress_idx on inbox (consumer, lease_until) where state = 'in_progress';
-- The outbox as idem's migrations leave it (produce_*.sql): no primary key (migration 0011 dropped the one on
-- seq), the dedup's unique constraint, and outbox_pending_idx, the two indexes a new event enters; and Watermill's
-- SQL table for comparison.
create table outbox (seq bigint generated always as identity, source text not null, event_id text not null, type text not null, subject text not null, ce_subject text not null default '', time bigint not null, datacontenttype text not null default '', ordering_key text not null default '', headers text not null default '{}', payload bytea not null, state text not null default 'pending' check (state in ('pending', 'completed', 'failed')), attempts integer not null default 0, last_error text not null default '', next_attempt_at bigint not null default 0, claimed_by text not null default '', claim_until bigint not null default 0, created_at bigint not null, published_at bigint not null default 0, traceparent text not null default '', tracestate text not null default '', key_claim_until bigint not null default 0, unique (source, event_id)) with (fillfactor = 50);
create index outbox_pending_idx on outbox (seq) where state = 'pending';
create table watermill_orders ("offset" bigserial, uuid varchar(36) not null, created_at timestamp not null default current_timestamp, payload json, metadata json, transaction_id xid8 not null, primary key (transaction_id, "offset"));
create sequence event_ids;
