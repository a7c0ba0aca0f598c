-- A revision of a dead letter (dlq.Store.Revise) is recorded with the
-- letter before it is published: revision_id is the revision's message id
-- ('' for none), revision_payload its payload, and
-- revision_record_expires_at the expiry of the inbox record the revision
-- wrote for the original (0 for none), which tells that record from one a
-- later copy of the original wrote. A parked letter with a revision_id has
-- a revision that may be out (its publish failed or timed out, or the
-- resolution after it did not commit): it is not redriven, since the
-- original beside the revision would be a second effect; it is revised
-- again (the same revision id and payload, a duplicate in the consumer's
-- inbox if it is out) or discarded. The constraint makes a program
-- older than this migration fail to redrive such a letter, instead of
-- marking it redriven while the consumer drops the original as a duplicate
-- of the revision's record.
ALTER TABLE {{t}}dead_letters ADD COLUMN revision_id text NOT NULL DEFAULT '',
    ADD COLUMN revision_payload bytea NOT NULL DEFAULT '',
    ADD COLUMN revision_record_expires_at bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT {{p}}dead_letters_revision_not_redriven CHECK (state <> 'redriven' OR revision_id = '');
