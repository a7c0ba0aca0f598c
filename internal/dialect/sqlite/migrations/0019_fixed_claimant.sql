-- Nothing to do on SQLite: MySQL's 0019 keeps the width of claimed_by the
-- same on every claim so that InnoDB rewrites the row in place. SQLite
-- rewrites the row's page either way; the file keeps the dialects'
-- migration lists in step.
SELECT 1;
