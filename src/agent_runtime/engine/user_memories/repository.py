"""The memories domain's SQL (named statements, every one scoped by the owner, `user_id` = $1).

Vectors travel as pgvector's text form cast to `vector` (no codec on the shared pool). Recall orders by cosine
distance (`<=>`, the HNSW index's operator class) among the owner's vectors of the configured model.
"""

from __future__ import annotations

import asyncpg

from agent_runtime.engine.user_memories.models import Memory, RecalledMemory

MEMORY_COLUMNS = "id, text, source_message_ids, source_session_id, created_at, updated_at"

# An extraction writes only while the owner's generation is the one its run started with ($7 on insert, $8 on
# update): DELETE /v1/memories bumps it in the transaction that deletes (DELETE_ALL_SQL), so a delete-all that
# commits wins over every extraction in flight. The upsert creates the owner's row if there is none yet and locks it
# until the write commits; a delete-all's bump waits for that lock (and its DELETE, the next statement, then sees the
# write), or the write waits for the bump's commit and sees the new generation. No-op update: RETURNING gives the
# generation in force, whichever came first.
_GENERATION_LOCK = """
g AS (
    INSERT INTO user_memory_generations AS g (user_id) VALUES ($1)
    ON CONFLICT (user_id) DO UPDATE SET generation = g.generation
    RETURNING generation
)"""

# $1 owner, $2 text, $3 source message ids, $4 session, $5 vector, $6 model, $7 the run's generation.
INSERT_SQL = f"""
WITH {_GENERATION_LOCK}
INSERT INTO user_memories (user_id, text, source_message_ids, source_session_id, embedding, embedding_model)
SELECT $1, $2, $3, $4, $5::vector, $6 FROM g WHERE g.generation = $7
RETURNING {MEMORY_COLUMNS}
"""

# $1 owner, $2 id, $3 text, $4 new source message ids, $5 session, $6 vector, $7 model, $8 the run's generation.
UPDATE_SQL = f"""
WITH {_GENERATION_LOCK}
UPDATE user_memories
SET text = $3, embedding = $6::vector, embedding_model = $7, source_session_id = $5, updated_at = now(),
    source_message_ids = (
        SELECT coalesce(array_agg(s ORDER BY n), '{{}}') FROM (
            SELECT s, min(n) AS n FROM unnest(source_message_ids || $4::text[]) WITH ORDINALITY AS t(s, n)
            GROUP BY s ORDER BY min(n) DESC LIMIT 64) d)
WHERE user_id = $1 AND id = $2 AND EXISTS (SELECT 1 FROM g WHERE g.generation = $8)
RETURNING {MEMORY_COLUMNS}
"""

DELETE_SQL = "DELETE FROM user_memories WHERE user_id = $1 AND id = $2 RETURNING id"
# Two statements in one transaction, in this order: the bump first (it waits for an extraction's write holding the
# generation row), then the DELETE, whose snapshot is taken after the bump and so sees that write.
BUMP_GENERATION_SQL = """
INSERT INTO user_memory_generations AS g (user_id, generation) VALUES ($1, 1)
ON CONFLICT (user_id) DO UPDATE SET generation = g.generation + 1
"""
DELETE_ALL_SQL = "DELETE FROM user_memories WHERE user_id = $1"

COUNT_SQL = "SELECT count(*) FROM user_memories WHERE user_id = $1"
LIST_SQL = f"""
SELECT {MEMORY_COLUMNS}, NULL::float8 AS similarity FROM user_memories WHERE user_id = $1
ORDER BY updated_at DESC, id DESC LIMIT $2 OFFSET $3
"""
# $2 the ILIKE pattern, $3 the query's vector, $4 model: text matches first, then by meaning.
SEARCH_SQL = f"""
SELECT {MEMORY_COLUMNS}, 1 - (embedding <=> $3::vector) AS similarity FROM user_memories
WHERE user_id = $1
ORDER BY (text ILIKE $2) DESC, CASE WHEN embedding_model = $4 THEN embedding <=> $3::vector END NULLS LAST, id
LIMIT $5 OFFSET $6
"""

# One statement before a run: the top $4 by meaning ($2 the vector, $3 the model), and which memories the
# session's earlier turns were shown ($5 the session), so that their requests are repeated as they were sent.
RECALL_SQL = """
(SELECT 'hit' AS kind, NULL::text AS message_id, id, text, 1 - (embedding <=> $2::vector) AS similarity,
        0::smallint AS rank
 FROM user_memories WHERE user_id = $1 AND embedding_model = $3
 ORDER BY embedding <=> $2::vector LIMIT $4)
UNION ALL
(SELECT 'past', r.message_id, m.id, m.text, NULL, r.rank
 FROM user_memory_recalls r JOIN user_memories m ON m.user_id = r.user_id AND m.id = r.memory_id
 WHERE r.user_id = $1 AND r.session_id = $5 AND $5::uuid IS NOT NULL)
"""

# $2 session, $3 the turn's message id, $4 memory ids in rank order.
RECORD_RECALL_SQL = """
INSERT INTO user_memory_recalls (user_id, session_id, message_id, memory_id, rank)
SELECT $1, $2, $3, memory_id, (ordinality - 1)::smallint FROM unnest($4::uuid[]) WITH ORDINALITY AS t(memory_id)
ON CONFLICT DO NOTHING
"""

# The forget tool: the owner's memories at least $4 similar to what the user asks to forget, at most $5.
FORGET_SQL = """
DELETE FROM user_memories WHERE user_id = $1 AND id IN (
    SELECT id FROM user_memories WHERE user_id = $1 AND embedding_model = $3
      AND 1 - (embedding <=> $2::vector) >= $4
    ORDER BY embedding <=> $2::vector LIMIT $5)
RETURNING text
"""


def row_to_memory(row: asyncpg.Record) -> Memory:
    similarity = row.get("similarity")
    return Memory(
        id=row["id"],
        text=row["text"],
        source_message_ids=list(row["source_message_ids"]),
        source_session_id=row["source_session_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        similarity=float(similarity) if similarity is not None else None,
    )


def row_to_recalled(row: asyncpg.Record) -> RecalledMemory:
    return RecalledMemory(id=row["id"], text=row["text"], similarity=float(row["similarity"] or 0.0))
