-- Nothing to do on PostgreSQL: MySQL's 0019 keeps the width of claimed_by
-- the same on every claim so that InnoDB rewrites the row in place. Here a
-- keyless claim is already a heap-only update (0013). The file keeps the
-- dialects' migration lists in step.
SELECT 1;
