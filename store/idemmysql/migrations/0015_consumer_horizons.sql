-- The replay horizon each consumer declares (issue 30): a consumer records
-- its inbox retention here every time it starts, so that a dead-letter
-- redrive is checked against the retention the consumer really has, not a
-- value an operator typed. One row per consumer name (as wide as the
-- inbox's); the last start wins. Microseconds.
CREATE TABLE {{t}}consumer_horizons (
    consumer        VARBINARY(255) NOT NULL PRIMARY KEY,
    inbox_retention BIGINT         NOT NULL,
    recorded_at     BIGINT         NOT NULL
) ENGINE=InnoDB;
