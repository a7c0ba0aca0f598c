-- Sagas (package saga): one row per saga run, and one barrier row per
-- (saga, step, do|undo) whose primary key decides the races of a
-- compensation and its action (see the PostgreSQL migration).
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}sagas (
    saga_id         VARBINARY(1024) NOT NULL PRIMARY KEY,
    name            LONGBLOB        NOT NULL,
    fingerprint     VARBINARY(255)  NOT NULL,
    input           LONGBLOB        NOT NULL,
    state           VARBINARY(16)   NOT NULL DEFAULT 'running',
    step            INT             NOT NULL DEFAULT 0,
    steps           INT             NOT NULL,
    current_key     VARBINARY(1024) NOT NULL,
    abort_requested INT             NOT NULL DEFAULT 0,
    version         BIGINT          NOT NULL DEFAULT 0,
    last_error      LONGBLOB        NOT NULL DEFAULT (''),
    created_at      BIGINT          NOT NULL,
    updated_at      BIGINT          NOT NULL,
    CONSTRAINT {{p}}sagas_state_check CHECK (state IN ('running', 'compensating', 'completed', 'compensated', 'held'))
) ENGINE=InnoDB;
CREATE INDEX {{p}}sagas_state_idx ON {{t}}sagas (state, updated_at);
CREATE TABLE {{t}}saga_steps (
    saga_id    VARBINARY(1024) NOT NULL,
    step       INT             NOT NULL,
    op         VARBINARY(8)    NOT NULL,
    step_name  LONGBLOB        NOT NULL,
    origin     VARBINARY(8)    NOT NULL,
    outcome    VARBINARY(16)   NOT NULL DEFAULT 'started',
    result     LONGBLOB,
    created_at BIGINT          NOT NULL,
    updated_at BIGINT          NOT NULL,
    PRIMARY KEY (saga_id, step, op),
    CONSTRAINT {{p}}saga_steps_op_check CHECK (op IN ('do', 'undo')),
    CONSTRAINT {{p}}saga_steps_origin_check CHECK (origin IN ('do', 'undo')),
    CONSTRAINT {{p}}saga_steps_outcome_check CHECK (outcome IN ('started', 'applied', 'null', 'refused'))
) ENGINE=InnoDB;
