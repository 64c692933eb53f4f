-- Regenerations (issue 23): a client asked for its last user turn to be answered again. The store is
-- append-only, so the replaced reply's rows stay where they are; a range here says that its visible rows
-- (seq from_seq..to_seq: the tool calls, tool results and answer after the regenerated user message) are
-- audit from then on. Every read of the visible conversation leaves these ranges out
-- (engine/messages/repository.py, `visible_sql`); usage and budgets count every row, so both replies are billed.
-- Owner-scoped like all user data: the session's owner is the range's owner (composite foreign key).
CREATE TABLE agent_chat_superseded (
    session_id uuid        NOT NULL,
    user_id    uuid        NOT NULL,
    from_seq   bigint      NOT NULL,
    to_seq     bigint      NOT NULL,
    -- The regenerating run, which wrote the range in its start statement.
    run_id     uuid        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_agent_chat_superseded PRIMARY KEY (session_id, from_seq),
    -- Visible rows only (seq 1 is the thread's first user message, never a reply).
    CONSTRAINT ck_superseded_range CHECK (from_seq >= 2 AND from_seq <= to_seq),
    CONSTRAINT uq_superseded_run UNIQUE (run_id),
    CONSTRAINT fk_superseded_session FOREIGN KEY (session_id, user_id)
        REFERENCES agent_chat_sessions (id, user_id) ON DELETE CASCADE,
    CONSTRAINT fk_superseded_run FOREIGN KEY (run_id) REFERENCES agent_runs (id) ON DELETE CASCADE
);
