-- Columns as wide as the values idem accepts (issue 30). The HTTP key's
-- tenant and operation were VARBINARY(255) and VARBINARY(512) against
-- idemhttp.MaxTenantLen (512) and MaxOperationLen (1024): in strict mode a
-- longer scope failed as a store error (503 for ever), in a non-strict one
-- it was truncated and two tenants shared a record. The primary key
-- (tenant, operation, idem_key) is 512 + 1024 + 1024 = 2560 bytes, within
-- InnoDB's 3072-byte index key. The audit log's actor is stored up to the
-- console's 8 KiB cap (console.clean), beyond VARBINARY(1024): it becomes a
-- LONGBLOB like the other free-text columns (it is in no index).
ALTER TABLE {{t}}idempotency_keys
    MODIFY tenant    VARBINARY(512)  NOT NULL,
    MODIFY operation VARBINARY(1024) NOT NULL;
ALTER TABLE {{t}}audit_log MODIFY actor LONGBLOB NOT NULL;
