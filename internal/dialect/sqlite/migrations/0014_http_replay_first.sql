-- Nothing to do on SQLite: PostgreSQL's 0014 lets its lock-and-read
-- function answer a replay without taking the key's advisory lock. The file
-- keeps the two dialects' migration lists in step.
SELECT 1;
