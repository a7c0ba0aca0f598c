-- Nothing to do on MySQL: PostgreSQL's 0012 creates the function that takes
-- idemhttp's session advisory lock and reads the key's record in one
-- statement; MySQL's HTTP keys take no session lock (HTTPKeys.LockKey is
-- not needed). The file keeps the dialects' migration lists in step.
DO 0;
