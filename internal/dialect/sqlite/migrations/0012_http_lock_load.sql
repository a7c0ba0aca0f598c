-- Nothing to do on SQLite: PostgreSQL's 0012 creates the function that
-- takes idemhttp's session advisory lock and reads the key's record in one
-- statement. SQLite has no advisory locks (BEGIN IMMEDIATE serialises
-- writers); the file keeps the two dialects' migration lists in step.
SELECT 1;
