-- A revision of a dead letter (dlq.Store.Revise) is recorded with the
-- letter before it is published: revision_id is the revision's message id
-- ('' for none). A parked letter with a revision_id has a revision that
-- may be out (its publish failed or timed out, or the resolution after it
-- did not commit): it is not redriven, since the original beside the
-- revision would be a second effect; it is revised again (the same
-- revision id, a duplicate in the consumer's inbox if it is out) or
-- discarded. A resolved letter keeps the id of the revision that replaced
-- it.
ALTER TABLE {{t}}dead_letters ADD COLUMN revision_id VARBINARY(64) NOT NULL DEFAULT '';
