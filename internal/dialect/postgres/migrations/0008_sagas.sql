-- Sagas (package saga): one row per saga run, keyed by the saga id, and one
-- barrier row per (saga, step, do|undo). The barrier's primary key decides
-- the two races of a compensation and its action in the database: the
-- first of them to insert the (saga, step, 'do') row wins; a compensation
-- that inserts it (origin 'undo') is a null compensation and the late
-- action is refused, and an action never runs once an 'undo' row exists.
-- state: running → completed, or running → compensating → compensated;
-- held = a compensation failed (exhausted or permanent), reconcile.
-- current_key is the effect (in {{t}}effects) the saga waits for.
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}sagas (
    saga_id         text    NOT NULL PRIMARY KEY,
    name            text    NOT NULL,
    fingerprint     bytea   NOT NULL,
    input           bytea   NOT NULL,
    state           text    NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'compensating', 'completed', 'compensated', 'held')),
    step            integer NOT NULL DEFAULT 0,
    steps           integer NOT NULL,
    current_key     text    NOT NULL,
    abort_requested integer NOT NULL DEFAULT 0,
    version         bigint  NOT NULL DEFAULT 0,
    last_error      text    NOT NULL DEFAULT '',
    created_at      bigint  NOT NULL,
    updated_at      bigint  NOT NULL
);
CREATE INDEX {{p}}sagas_active_idx ON {{t}}sagas (updated_at) WHERE state IN ('running', 'compensating', 'held');
CREATE TABLE {{t}}saga_steps (
    saga_id    text    NOT NULL,
    step       integer NOT NULL,
    op         text    NOT NULL CHECK (op IN ('do', 'undo')),
    step_name  text    NOT NULL,
    origin     text    NOT NULL CHECK (origin IN ('do', 'undo')),
    outcome    text    NOT NULL DEFAULT 'started'
               CHECK (outcome IN ('started', 'applied', 'null', 'refused')),
    result     bytea,
    created_at bigint  NOT NULL,
    updated_at bigint  NOT NULL,
    PRIMARY KEY (saga_id, step, op)
);
