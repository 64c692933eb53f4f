-- Where each conversation's cache-aware memory window starts, and the summary of what its cuts dropped
-- (engine/memory: window.plan_window). One row per cut, never updated: the newest (highest start_seq) is
-- the current one, so every process reads the same start. Owned like messages: the composite foreign key
-- makes a mark's owner its session's owner, and deleting the session deletes its marks.
CREATE TABLE agent_memory_windows (
    session_id        uuid NOT NULL,
    user_id           uuid NOT NULL,
    start_seq         bigint NOT NULL CHECK (start_seq > 0),
    start_message_id  text NOT NULL CHECK (char_length(start_message_id) BETWEEN 1 AND 200),
    summary           text,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session_id, start_seq),
    CONSTRAINT fk_memory_windows_session FOREIGN KEY (session_id, user_id)
        REFERENCES agent_chat_sessions (id, user_id) ON DELETE CASCADE
);
