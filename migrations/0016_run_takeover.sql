-- Runs that survive their process (issue 33): a replica takes over a run whose lease expired and continues it from
-- its last stored step under the same run id (engine/runs/takeover/). What that needs, on the run's row:
-- `run_input`: the run's input as the service took it (RunInput), written by the start;
-- `first_seq`: its first visible row, from which its finish sums what it stored;
-- `resume_point`: the turn's decided intent (and the execution stage's request), written before the execution stage
--   makes its first call: from then on a takeover resumes the turn as an approval does, from its stored tool calls
--   and results; without one nothing irreversible has happened and the turn runs again from its start;
-- `takeovers`: how often the run was taken over (its event log's seqs start at takeovers * 1,000,000 + 1);
-- `settled_cny`: what the run had stored at its last takeover: the next charge of what a dead process had sent
--   subtracts only what was stored since.
ALTER TABLE agent_runs
    ADD COLUMN run_input jsonb,
    ADD COLUMN first_seq bigint,
    ADD COLUMN resume_point jsonb,
    ADD COLUMN takeovers integer NOT NULL DEFAULT 0,
    ADD COLUMN settled_cny numeric(20, 10) NOT NULL DEFAULT 0,
    ADD CONSTRAINT ck_agent_runs_takeovers CHECK (takeovers >= 0),
    ADD CONSTRAINT ck_agent_runs_settled_cny CHECK (settled_cny >= 0),
    ADD CONSTRAINT ck_agent_runs_resume_point CHECK (resume_point IS NULL OR jsonb_typeof(resume_point) = 'object');
