"""Append-only message storage with race-free sequence numbers.

Sequence numbers come from counters on the session row, advanced by one
`UPDATE ... RETURNING` in the same transaction as the inserts: the row lock it takes serialises
appends to one session in arrival order (no advisory locks, no max(seq)+1 race), and a rolled-back
append leaves no row behind (a gap in seq at worst, never a duplicate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import ConflictError
from agent_runtime.engine.messages.metadata import METADATA_ADAPTER
from agent_runtime.engine.messages.models import NewMessage, StoredMessage
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.sessions.models import build_session_title
from agent_runtime.engine.sessions.service import session_not_found
from agent_runtime.engine.text import storable

COLUMNS = (
    "id, session_id, message_id, seq, role, content, metadata, input_tokens, output_tokens, cost, currency, created_at"
)


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

_APPEND_SQL = f"""
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


@dataclass(frozen=True)
class MessageBatch:
    """Messages to append in one statement, as the arrays `incoming_rows_sql` unnests.

    `position` numbers visible and audit messages separately, so each kind gets consecutive seqs from its
    own counter in the order given.
    """

    messages: Sequence[NewMessage]

    @property
    def visible(self) -> int:
        return sum(not m.is_audit for m in self.messages)

    @property
    def audit(self) -> int:
        return sum(m.is_audit for m in self.messages)

    @property
    def title(self) -> str | None:
        """The session title the first user message gives (used only while the session has none)."""
        first_user = next((m for m in self.messages if m.role == "user"), None)
        return build_session_title(first_user.content) if first_user is not None else None

    def arrays(self) -> list[list[Any]]:
        positions: list[int] = []
        counts = {True: 0, False: 0}
        for message in self.messages:
            positions.append(counts[message.is_audit])
            counts[message.is_audit] += 1
        return [
            [m.message_id for m in self.messages],
            [m.role for m in self.messages],
            [storable(m.content) for m in self.messages],
            [m.metadata.model_dump(mode="json", exclude_none=True) for m in self.messages],
            [m.input_tokens for m in self.messages],
            [m.output_tokens for m in self.messages],
            [m.cost for m in self.messages],
            [m.is_audit for m in self.messages],
            positions,
        ]

    def conflict(self) -> ConflictError:
        if len(self.messages) == 1:
            return ConflictError("a message with this id is already stored in this session")
        ids = ", ".join(repr(m.message_id) for m in self.messages)
        return ConflictError(f"a message id among {ids} is already stored in this session")


async def insert_messages(
    conn: asyncpg.Connection | asyncpg.Pool, ctx: RequestContext, session_id: UUID, messages: Sequence[NewMessage]
) -> list[StoredMessage]:
    """Append `messages` in order in one statement (so one round trip and atomic on its own)."""
    if not messages:
        return []
    batch = MessageBatch(messages)
    try:
        rows = await conn.fetch(
            _APPEND_SQL, session_id, ctx.user_id, batch.visible, batch.audit, batch.title, *batch.arrays()
        )
    except asyncpg.UniqueViolationError as exc:
        raise batch.conflict() from exc
    if not rows:
        raise session_not_found(session_id)
    by_id = {row["message_id"]: row_to_message(row) for row in rows}
    return [by_id[m.message_id] for m in messages]


class MessageStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def append(
        self, ctx: RequestContext, session_id: UUID, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        return await insert_messages(self._pool, ctx, session_id, messages)

    async def append_one(self, ctx: RequestContext, session_id: UUID, message: NewMessage) -> StoredMessage:
        (stored,) = await self.append(ctx, session_id, [message])
        return stored

    async def existing_message_ids(self, ctx: RequestContext, session_id: UUID, message_ids: Sequence[str]) -> set[str]:
        rows = await self._pool.fetch(
            """
            SELECT message_id FROM agent_chat_messages
            WHERE session_id = $1 AND user_id = $2 AND message_id = ANY($3::text[])
            """,
            session_id,
            ctx.user_id,
            list(message_ids),
        )
        return {r["message_id"] for r in rows}

    async def run_id_used(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> bool:
        used = await self._pool.fetchval(
            """
            SELECT 1 FROM agent_chat_messages
            WHERE session_id = $1 AND user_id = $2 AND metadata ->> 'run_id' = $3 LIMIT 1
            """,
            session_id,
            ctx.user_id,
            str(run_id),
        )
        return used is not None

    async def list_visible(
        self, ctx: RequestContext, session_id: UUID, *, limit: int, offset: int
    ) -> Page[StoredMessage]:
        async with self._pool.acquire() as conn:
            owned = await conn.fetchval(
                "SELECT 1 FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
            )
            if owned is None:
                raise session_not_found(session_id)
            total = await conn.fetchval(
                "SELECT count(*) FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2 AND seq > 0",
                session_id,
                ctx.user_id,
            )
            rows = await conn.fetch(
                f"""
                SELECT {COLUMNS} FROM agent_chat_messages
                WHERE session_id = $1 AND user_id = $2 AND seq > 0
                ORDER BY seq LIMIT $3 OFFSET $4
                """,
                session_id,
                ctx.user_id,
                limit,
                offset,
            )
        return Page[StoredMessage](items=[row_to_message(r) for r in rows], total=total, limit=limit, offset=offset)

    async def list_all(self, ctx: RequestContext, session_id: UUID) -> list[StoredMessage]:
        """Every row of a session, audit included, in insertion order (tests and admin tooling)."""
        rows = await self._pool.fetch(
            f"""
            SELECT {COLUMNS} FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2
            ORDER BY created_at, seq
            """,
            session_id,
            ctx.user_id,
        )
        return [row_to_message(r) for r in rows]
