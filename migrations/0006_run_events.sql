-- A durable log of every event a run streams (README "Resuming a stream"): a client that lost its
-- connection resumes from any replica with Last-Event-ID; LISTEN/NOTIFY wakes followers, the log is the truth.

ALTER TABLE agent_runs
    ADD CONSTRAINT uq_runs_id_user UNIQUE (id, user_id),
    ADD COLUMN cancel_requested_at timestamptz,
    -- Set by the statement that stores the run's terminal event (RUN_FINISHED or RUN_ERROR).
    ADD COLUMN log_complete boolean NOT NULL DEFAULT false,
    -- Set once retention has removed the run's events (the sweep's progress marker).
    ADD COLUMN events_expired boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT chk_run_status,
    ADD CONSTRAINT chk_run_status CHECK (status IN ('running', 'completed', 'failed', 'cancelled'));

-- Runs of earlier versions streamed no logged events: nothing to wait for.
UPDATE agent_runs SET log_complete = true WHERE status <> 'running';

CREATE TABLE agent_run_events (
    run_id     uuid NOT NULL,
    seq        integer NOT NULL CHECK (seq > 0),
    user_id    uuid NOT NULL,
    -- The SSE `data:` payload exactly as it was streamed (a resumed stream repeats it byte for byte).
    data       text NOT NULL,
    terminal   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq),
    CONSTRAINT fk_events_run FOREIGN KEY (run_id, user_id) REFERENCES agent_runs (id, user_id) ON DELETE CASCADE
);

-- The sweep's two scans: runs whose log never got its terminal event, and finished runs past retention.
CREATE INDEX idx_runs_log_incomplete ON agent_runs (finished_at) WHERE NOT log_complete AND status <> 'running';
CREATE INDEX idx_runs_events_retained ON agent_runs (finished_at) WHERE NOT events_expired AND finished_at IS NOT NULL;
