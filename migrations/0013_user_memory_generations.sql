-- "Delete all memories" wins over extractions in flight (issue 32). Each owner has a generation: DELETE
-- /v1/memories bumps it in the transaction that deletes, a run notes it when it starts, and its extraction's
-- writes lock this row and insert or update only while it is still the run's (engine/user_memories/repository.py).
-- No row: generation 0 (the row appears with the owner's first write or delete-all).
CREATE TABLE user_memory_generations (
    user_id    uuid   NOT NULL,
    generation bigint NOT NULL DEFAULT 0,
    CONSTRAINT pk_user_memory_generations PRIMARY KEY (user_id),
    CONSTRAINT ck_user_memory_generations CHECK (generation >= 0)
);
