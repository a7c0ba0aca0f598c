-- Nothing to do on MySQL: PostgreSQL's 0013 makes a relay's claim of a
-- keyless event a heap-only update (a lease column of its own for the
-- blocking index, and a fillfactor); InnoDB updates the claim's columns in
-- place either way. The file keeps the dialects' migration lists in step.
DO 0;
