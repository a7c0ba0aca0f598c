-- idemhttp's pipelined path on pgx (http_idem.sql): the key's session advisory lock and the
-- read of its record in one statement, as idem's migration 0012 creates it.
create function lock_load(p_tenant text, p_operation text, p_key text, p_lock bigint, p_lock_timeout text)
returns setof keys language plpgsql volatile as $$
begin
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
