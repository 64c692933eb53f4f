"""The sessions domain's SQL: its named statements and the row -> `Session` mapper.

Convention (every domain's `repository.py`): each statement is a module constant named for what it does,
built once at import; services bind parameters to these and never build SQL themselves. Every statement
on a user-owned table takes the owner (`user_id`) as a parameter. Constants rather than a `queries.sql`
with named blocks: statements here share fragments (column lists, the conversation's `unnest` of new
rows) that an f-string composes once, where a `.sql` file would repeat them or need a template step.
"""

from __future__ import annotations

import asyncpg

from agent_runtime.engine.sessions.models import Session, StateSnapshot, waiting_turn

SESSION_COLUMNS = (
    "id, title, status, state_snapshot, pending_turn, error_id, billing_currency, billing_country_snapshot, model, "
    "created_at, updated_at"
)

INSERT_SQL = f"""
INSERT INTO agent_chat_sessions (id, user_id, title, billing_currency, billing_country_snapshot, model)
VALUES ($1, $2, $3, 'CNY', $4, $5)
RETURNING {SESSION_COLUMNS}
"""

GET_SQL = f"SELECT {SESSION_COLUMNS} FROM agent_chat_sessions WHERE id = $1 AND user_id = $2"

# $1 owner, $2 the ILIKE pattern of the title search (NULL: every title).
_LIST_WHERE = "user_id = $1 AND ($2::text IS NULL OR title ILIKE $2)"
COUNT_SQL = f"SELECT count(*) FROM agent_chat_sessions WHERE {_LIST_WHERE}"
LIST_SQL = f"""
SELECT {SESSION_COLUMNS} FROM agent_chat_sessions WHERE {_LIST_WHERE}
ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4
"""

UPDATE_TITLE_SQL = f"""
UPDATE agent_chat_sessions SET title = $3, updated_at = now()
WHERE id = $1 AND user_id = $2 RETURNING {SESSION_COLUMNS}
"""

# Messages go with it through ON DELETE CASCADE on the (session_id, user_id) foreign key.
DELETE_SQL = "DELETE FROM agent_chat_sessions WHERE id = $1 AND user_id = $2 RETURNING id"


def row_to_session(row: asyncpg.Record) -> Session:
    return Session(
        id=row["id"],
        title=row["title"],
        status=row["status"],
        state_snapshot=StateSnapshot.model_validate(row["state_snapshot"]),
        waiting_for=waiting_turn(row["pending_turn"]),
        error_id=row["error_id"],
        billing_currency=row["billing_currency"],
        billing_country_snapshot=row["billing_country_snapshot"],
        model=row["model"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
