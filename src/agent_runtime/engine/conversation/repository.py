"""The SQL of the message rows: named statements and the row -> `StoredMessage` mapper (the convention is in
`engine/sessions/repository.py`). Every statement takes the owner (`user_id`).

The append statements (here and the run store's start and finish, `engine/runs/ledger/store.py`) share two
fragments: `incoming_rows_sql` (the new rows as `unnest`ed arrays, bound by `store.MessageBatch`) and
`INSERT_ROWS_SQL` (their insert, numbered from the session's counters).
"""

from __future__ import annotations

import asyncpg

from agent_runtime.engine.conversation.metadata import METADATA_ADAPTER
from agent_runtime.engine.conversation.stored_messages import StoredMessage

COLUMNS = (
    "id, session_id, message_id, seq, role, content, metadata, input_tokens, output_tokens, cost, currency, created_at"
)


def incoming_rows_sql(first_param: int) -> str:
    """`unnest(...)` of the nine arrays `MessageBatch.arrays()` binds from parameter `$first_param` on: one row
    per message, numbered by `position` (visible and audit messages separately)."""
    types = ("text", "text", "text", "jsonb", "int", "int", "numeric", "bool", "int")
    arrays = ", ".join(f"${first_param + i}::{t}[]" for i, t in enumerate(types))
    columns = "message_id, role, content, metadata, input_tokens, output_tokens, cost, is_audit, position"
    return f"unnest({arrays}) AS i({columns})"


# `c` is the session row after its counters moved (first_seq, first_audit_seq, billing_currency).
INSERT_ROWS_SQL = """
INSERT INTO agent_chat_messages (id, session_id, user_id, message_id, seq, role, content, metadata,
                                 input_tokens, output_tokens, cost, currency)
SELECT gen_random_uuid(), $1, $2, i.message_id,
       CASE WHEN i.is_audit THEN c.first_audit_seq - i.position ELSE c.first_seq + i.position END,
       i.role, i.content, i.metadata, i.input_tokens, i.output_tokens, i.cost, c.billing_currency
"""

# $3 visible and $4 audit messages; $5 the title the session takes if it has none. No row back: the session
# is missing or someone else's.
APPEND_SQL = f"""
WITH counters AS (
    UPDATE agent_chat_sessions
       SET next_seq = next_seq + $3, next_audit_seq = next_audit_seq - $4,
           title = COALESCE(title, $5), updated_at = now()
     WHERE id = $1 AND user_id = $2
    RETURNING next_seq - $3 AS first_seq, next_audit_seq + $4 AS first_audit_seq, billing_currency
)
{INSERT_ROWS_SQL}
FROM {incoming_rows_sql(6)} CROSS JOIN counters c
RETURNING {COLUMNS}
"""

SESSION_OWNED_SQL = "SELECT 1 FROM agent_chat_sessions WHERE id = $1 AND user_id = $2"


def superseded_sql(seq: str = "seq") -> str:
    """Whether the row whose seq is `seq` lies in a range a regeneration replaced (migrations/0012), in the
    session `$1` of the owner `$2`."""
    return (
        "EXISTS (SELECT 1 FROM agent_chat_superseded x WHERE x.session_id = $1 AND x.user_id = $2"
        f" AND {seq} BETWEEN x.from_seq AND x.to_seq)"
    )


def visible_sql(seq: str = "seq") -> str:
    """The visible conversation's rows: seq > 0, and not replaced by a regeneration. Every read of what a client
    or the model sees of a thread takes this; usage and budgets do not (a replaced reply stays billed)."""
    return f"{seq} > 0 AND NOT {superseded_sql(seq)}"


COUNT_VISIBLE_SQL = (
    f"SELECT count(*) FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2 AND {visible_sql()}"
)

PAGE_VISIBLE_SQL = f"""
SELECT {COLUMNS} FROM agent_chat_messages
WHERE session_id = $1 AND user_id = $2 AND {visible_sql()}
ORDER BY seq LIMIT $3 OFFSET $4
"""

# The rows regenerations replaced (visible before, audit now), in seq order.
COUNT_SUPERSEDED_SQL = f"""
SELECT count(*) FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2 AND seq > 0 AND {superseded_sql()}
"""

PAGE_SUPERSEDED_SQL = f"""
SELECT {COLUMNS} FROM agent_chat_messages
WHERE session_id = $1 AND user_id = $2 AND seq > 0 AND {superseded_sql()}
ORDER BY seq LIMIT $3 OFFSET $4
"""

LATEST_VISIBLE_SQL = f"""
SELECT * FROM (
    SELECT {COLUMNS} FROM agent_chat_messages
    WHERE session_id = $1 AND user_id = $2 AND {visible_sql()}
    ORDER BY seq DESC LIMIT $3
) newest ORDER BY seq
"""


# One image of one of the owner's visible user messages ($3: the image id); no row: none such for this owner.
IMAGE_SQL = """
SELECT img ->> 'mime_type' AS mime_type, img ->> 'data' AS data
FROM agent_chat_messages m CROSS JOIN LATERAL jsonb_array_elements(m.metadata -> 'images') AS img
WHERE m.session_id = $1 AND m.user_id = $2 AND m.seq > 0 AND m.metadata ->> 'kind' = 'user_input'
  AND img ->> 'id' = $3 AND img ? 'data'
LIMIT 1
"""


def row_to_message(row: asyncpg.Record) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        session_id=row["session_id"],
        message_id=row["message_id"],
        seq=row["seq"],
        role=row["role"],
        content=row["content"],
        metadata=METADATA_ADAPTER.validate_python(row["metadata"]),
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cost=row["cost"],
        currency=row["currency"],
        created_at=row["created_at"],
    )


# The chat memory's window on PostgreSQL (`postgres.py`). Every statement takes the caller's `user_id`.
_COLUMNS = "message_id, seq, role, content, metadata, created_at"
# Visible and not replaced by a regeneration (`visible_sql` above).
_VISIBLE = f"session_id = $1 AND user_id = $2 AND {visible_sql()}"
# One statement of bounded index reads: the newest mark (primary key of agent_memory_windows); before any cut,
# the first user message instead; the newest `$3` + 1 non-system messages from that start (one more than asked,
# to know whether there are more; idx_messages_session_seq_display); the newest system message and, when that
# tail has no user message, the newest user message (idx_messages_session_role_seq). The mark (or first user
# message) comes back as a row of its own (seq = start, message_id = start id, content = summary, metadata = the
# head's end), and the pinned opening turns before the head's end (window rule 11) as rows of their own, so a run's
# memory costs one round trip however the window was cut.
WINDOW_SQL = f"""
WITH mark AS (
    SELECT start_seq, start_message_id, summary, head_end_seq, head_end_message_id FROM agent_memory_windows
    WHERE session_id = $1 AND user_id = $2 ORDER BY start_seq DESC LIMIT 1
), head AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role <> 'system' AND seq < (SELECT head_end_seq FROM mark)
    ORDER BY seq LIMIT $3
), first_user AS (
    SELECT seq, message_id FROM agent_chat_messages
    WHERE {_VISIBLE} AND role = 'user' AND NOT EXISTS (SELECT 1 FROM mark) ORDER BY seq LIMIT 1
), tail AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role <> 'system'
      AND seq >= COALESCE((SELECT start_seq FROM mark), (SELECT seq FROM first_user), 1)
    ORDER BY seq DESC LIMIT $3 + 1
), sys AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role = 'system' ORDER BY seq DESC LIMIT 1
), anchor AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role = 'user' AND NOT EXISTS (SELECT 1 FROM tail WHERE tail.role = 'user')
    ORDER BY seq DESC LIMIT 1
)
SELECT 'system' AS part, * FROM sys UNION ALL SELECT 'anchor', * FROM anchor UNION ALL SELECT 'tail', * FROM tail
UNION ALL SELECT 'head', * FROM head
UNION ALL
SELECT 'mark', start_message_id, start_seq, 'system', COALESCE(summary, ''),
       jsonb_build_object('head_end_message_id', head_end_message_id), NULL::timestamptz FROM mark
UNION ALL
SELECT 'first_user', message_id, seq, 'user', '', NULL::jsonb, NULL::timestamptz FROM first_user
ORDER BY 3
"""
# Stored only when the start is a visible user message after the current mark's start: marks only move forward,
# and two processes storing the same cut store it once (the primary key).
SAVE_MARK_SQL = """
INSERT INTO agent_memory_windows (session_id, user_id, start_seq, start_message_id, summary, head_end_seq,
                                  head_end_message_id)
SELECT m.session_id, m.user_id, m.seq, m.message_id, $4, h.seq, h.message_id FROM agent_chat_messages m
LEFT JOIN agent_chat_messages h ON h.session_id = $1 AND h.user_id = $2 AND h.message_id = $5 AND h.seq > 0
WHERE m.session_id = $1 AND m.user_id = $2 AND m.message_id = $3 AND m.seq > 0 AND m.role = 'user'
  AND m.seq > COALESCE((SELECT max(w.start_seq) FROM agent_memory_windows w
                        WHERE w.session_id = $1 AND w.user_id = $2), 0)
ON CONFLICT DO NOTHING
RETURNING start_seq
"""
BETWEEN_SQL = f"""
SELECT {_COLUMNS} FROM agent_chat_messages
WHERE {_VISIBLE} AND role <> 'system'
  AND seq >= COALESCE((SELECT seq FROM agent_chat_messages WHERE {_VISIBLE} AND message_id = $3), 1)
  AND seq < (SELECT seq FROM agent_chat_messages WHERE {_VISIBLE} AND message_id = $4)
ORDER BY seq DESC LIMIT $5
"""


# The marks go too: a summary of deleted messages must not outlive them.
DELETE_CONVERSATION_SQL = (
    "WITH marks AS (DELETE FROM agent_memory_windows WHERE session_id = $1 AND user_id = $2), "
    "ranges AS (DELETE FROM agent_chat_superseded WHERE session_id = $1 AND user_id = $2) "
    "DELETE FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2"
)
