-- The chat-memory window read fetches the newest system message and the newest user message of a
-- session; without this index both scan back through the whole session when those rows are old.
CREATE INDEX idx_messages_session_role_seq ON agent_chat_messages (session_id, role, seq) WHERE seq > 0;
