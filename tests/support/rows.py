"""Every stored row of a session, audit rows included: no API returns them, so tests read the table."""

from __future__ import annotations

from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.repository import COLUMNS, row_to_message
from agent_runtime.engine.conversation.stored_messages import StoredMessage


async def stored_rows(pool: asyncpg.Pool, ctx: RequestContext, session_id: UUID) -> list[StoredMessage]:
    """In insertion order."""
    rows = await pool.fetch(
        f"SELECT {COLUMNS} FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2 ORDER BY created_at, seq",
        session_id,
        ctx.user_id,
    )
    return [row_to_message(r) for r in rows]
