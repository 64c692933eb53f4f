-- Runs as leased jobs (README "Runs under load"): a running session names the process that runs it and
-- until when; any replica's sweep fails a run whose lease has expired (`run_lost`). Per-user concurrency
-- is enforced here, so it holds across replicas and whatever code path starts a run.

ALTER TABLE agent_chat_sessions
    ADD COLUMN lease_owner      text,
    ADD COLUMN lease_expires_at timestamptz;

-- Sessions left `running` by a version without leases get an expired lease: the first sweep fails them.
UPDATE agent_chat_sessions SET lease_owner = 'pre-lease', lease_expires_at = run_started_at WHERE status = 'running';

ALTER TABLE agent_chat_sessions
    ADD CONSTRAINT chk_running_has_lease
        CHECK (status <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL));

-- The sweep's scan, and the per-user count of runs in progress.
CREATE INDEX idx_sessions_running_lease ON agent_chat_sessions (lease_expires_at) WHERE status = 'running';
CREATE INDEX idx_sessions_user_running ON agent_chat_sessions (user_id) WHERE status = 'running';

-- One row per run: a client's reused run id is caught by the primary key, and later issues hang the run's
-- event log and cancel requests on it.
CREATE TABLE agent_runs (
    id          uuid PRIMARY KEY,
    session_id  uuid NOT NULL,
    user_id     uuid NOT NULL,
    status      text NOT NULL DEFAULT 'running',
    error_code  text,
    error_id    text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    CONSTRAINT fk_runs_session FOREIGN KEY (session_id, user_id)
        REFERENCES agent_chat_sessions (id, user_id) ON DELETE CASCADE,
    CONSTRAINT chk_run_status CHECK (status IN ('running', 'completed', 'failed')),
    CONSTRAINT chk_run_finished CHECK ((status = 'running') = (finished_at IS NULL)),
    CONSTRAINT chk_run_failed_has_error CHECK (status <> 'failed' OR (error_code IS NOT NULL AND error_id IS NOT NULL))
);
CREATE INDEX idx_runs_session_created ON agent_runs (session_id, created_at);

-- Runs of earlier versions are known only from their messages' metadata; recorded so that their ids stay taken.
INSERT INTO agent_runs (id, session_id, user_id, status, finished_at)
SELECT DISTINCT ON ((m.metadata ->> 'run_id')::uuid) (m.metadata ->> 'run_id')::uuid, m.session_id, m.user_id,
       'completed', m.created_at
  FROM agent_chat_messages m
 WHERE m.metadata ->> 'run_id' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
ON CONFLICT (id) DO NOTHING;

-- At most `agent_runtime.max_runs_per_user` sessions of one user running at once (a setting each replica
-- puts on its connections; unset = no limit, e.g. for manual SQL). Two starts of one user on different
-- sessions would both count N-1 under READ COMMITTED, so starts are first serialised on the user's gate
-- row; the count that follows is a new statement, whose snapshot then sees every committed start.
CREATE TABLE user_run_gates (
    user_id uuid PRIMARY KEY
);

CREATE FUNCTION enforce_user_run_limit() RETURNS trigger AS $$
DECLARE
    max_runs integer := nullif(current_setting('agent_runtime.max_runs_per_user', true), '')::integer;
    running  integer;
BEGIN
    IF max_runs IS NULL OR NEW.status <> 'running'
       OR (TG_OP = 'UPDATE' AND OLD.status = 'running' AND OLD.run_id IS NOT DISTINCT FROM NEW.run_id) THEN
        RETURN NEW;
    END IF;
    INSERT INTO user_run_gates (user_id) VALUES (NEW.user_id)
        ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id;
    SELECT count(*) INTO running FROM agent_chat_sessions
     WHERE user_id = NEW.user_id AND status = 'running' AND lease_expires_at > now() AND id <> NEW.id;
    IF running >= max_runs THEN
        RAISE EXCEPTION 'user % already has % runs in progress (limit %)', NEW.user_id, running, max_runs
            USING ERRCODE = 'AR429';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_user_run_limit
    BEFORE INSERT OR UPDATE OF status, run_id ON agent_chat_sessions
    FOR EACH ROW EXECUTE FUNCTION enforce_user_run_limit();
