-- The conversation's opening turns pinned in front of the summary (issue 31; engine/conversation/window.py, rule
-- 11): the first cut stores where the head ends (the user message after it), every later mark carries it on, so a
-- cut keeps the request's prefix up to there byte-identical and the provider's cache still covers it. NULL: no
-- head (a policy without one, or marks stored before it existed). The head ends at or before the window's start.
ALTER TABLE agent_memory_windows
    ADD COLUMN head_end_seq bigint,
    ADD COLUMN head_end_message_id text,
    ADD CONSTRAINT ck_memory_windows_head CHECK (
        (head_end_seq IS NULL) = (head_end_message_id IS NULL)
        AND (head_end_seq IS NULL OR (head_end_seq > 0 AND head_end_seq <= start_seq))
    );
