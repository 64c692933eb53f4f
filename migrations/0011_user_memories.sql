-- Long-term memories (issue 24): durable facts about a user, kept across sessions, recalled by meaning.
-- Owner-scoped like all user data: the key is (user_id, id) and every statement names user_id. The text is
-- a third-person fact ("The user lives in Paris."), never shown to the model except JSON-escaped inside a
-- data block (engine/memories/block.py). Deleting a session keeps its memories (source_session_id is set
-- null); DELETE /v1/memories removes them.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE user_memories (
    id                 uuid        NOT NULL DEFAULT gen_random_uuid(),
    user_id            uuid        NOT NULL,
    text               text        NOT NULL,
    source_message_ids text[]      NOT NULL DEFAULT '{}',
    source_session_id  uuid        NULL,
    -- 384 dimensions: multilingual-e5-small, the offline default; a LiteLLM model must be asked for 384.
    embedding          vector(384) NOT NULL,
    embedding_model    text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_user_memories PRIMARY KEY (user_id, id),
    CONSTRAINT uq_user_memories_id UNIQUE (id),
    CONSTRAINT ck_user_memories_text CHECK (char_length(text) BETWEEN 1 AND 500 AND text !~ '[\n\r]'),
    CONSTRAINT ck_user_memories_sources CHECK (cardinality(source_message_ids) <= 64),
    CONSTRAINT ck_user_memories_model CHECK (char_length(embedding_model) BETWEEN 1 AND 200),
    CONSTRAINT ck_user_memories_updated CHECK (updated_at >= created_at),
    -- PostgreSQL 15: SET NULL of the one column, so the owner stays.
    CONSTRAINT fk_user_memories_session FOREIGN KEY (source_session_id, user_id)
        REFERENCES agent_chat_sessions (id, user_id) ON DELETE SET NULL (source_session_id)
);

-- The list (newest first) and the per-user exact scan the planner picks for users with few memories.
CREATE INDEX ix_user_memories_user_updated ON user_memories (user_id, updated_at DESC, id);
-- Recall by cosine distance; filtered by user_id (and the embedding model) after the index scan.
CREATE INDEX ix_user_memories_embedding ON user_memories USING hnsw (embedding vector_cosine_ops);

-- Which memories a turn was shown, so that later turns repeat that turn's request byte for byte (the
-- provider's prefix cache): the text is read from user_memories, so an updated memory shows its new text and a
-- deleted one disappears from every old turn (ON DELETE CASCADE).
CREATE TABLE user_memory_recalls (
    user_id    uuid     NOT NULL,
    session_id uuid     NOT NULL,
    message_id text     NOT NULL,
    memory_id  uuid     NOT NULL,
    rank       smallint NOT NULL,
    CONSTRAINT pk_user_memory_recalls PRIMARY KEY (user_id, session_id, message_id, memory_id),
    CONSTRAINT ck_user_memory_recalls_rank CHECK (rank BETWEEN 0 AND 49),
    CONSTRAINT fk_user_memory_recalls_memory FOREIGN KEY (user_id, memory_id)
        REFERENCES user_memories (user_id, id) ON DELETE CASCADE,
    CONSTRAINT fk_user_memory_recalls_session FOREIGN KEY (session_id, user_id)
        REFERENCES agent_chat_sessions (id, user_id) ON DELETE CASCADE
);
CREATE INDEX ix_user_memory_recalls_memory ON user_memory_recalls (user_id, memory_id);
