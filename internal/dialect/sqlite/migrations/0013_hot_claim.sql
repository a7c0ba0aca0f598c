-- Nothing to do on SQLite: PostgreSQL's 0013 makes a relay's claim of a
-- keyless event a heap-only update (a lease column of its own for the
-- blocking index, and a fillfactor). SQLite rewrites the row's page either
-- way; the file keeps the two dialects' migration lists in step.
SELECT 1;
