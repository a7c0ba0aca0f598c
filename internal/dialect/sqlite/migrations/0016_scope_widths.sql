-- Nothing to do on SQLite: MySQL's 0016 widens the HTTP key's tenant
-- and operation columns (and the audit log's actor) to the lengths idem
-- accepts; text here has no width. The file keeps the dialects' migration
-- lists in step.
SELECT 1;
