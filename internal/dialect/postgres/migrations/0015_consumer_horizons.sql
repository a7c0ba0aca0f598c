-- The replay horizon each consumer declares (issue 30): a consumer records
-- its inbox retention here every time it starts, so that a dead-letter
-- redrive is checked against the retention the consumer really has, not a
-- value an operator typed. One row per consumer name; the last start wins.
-- inbox_retention and recorded_at are microseconds (a duration, and since
-- the Unix epoch).
CREATE TABLE {{t}}consumer_horizons (
    consumer        text   PRIMARY KEY,
    inbox_retention bigint NOT NULL,
    recorded_at     bigint NOT NULL
);
