-- A lost run is charged what it had sent, not its whole hold (issue 32). Each lease renewal stores, per run, the
-- estimate of its calls so far: what the calls that came back were billed, and for those in flight their prompts
-- at their model's cache-miss price and the output they streamed (engine/runs/ledger/reservation.py, RunHold.sent).
-- It only grows. The sweep charges it, capped by the run's hold, less what the run stored
-- (engine/runs/ledger/repository.py, SWEEP_SQL).
ALTER TABLE agent_runs
    ADD COLUMN sent_cny numeric(20, 10) NOT NULL DEFAULT 0,
    ADD CONSTRAINT ck_agent_runs_sent_cny CHECK (sent_cny >= 0);
