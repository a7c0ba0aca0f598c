-- Nothing to do on MySQL: PostgreSQL's 0014 lets its lock-and-read function
-- answer a replay without taking the key's advisory lock. The file keeps the
-- dialects' migration lists in step.
DO 0;
