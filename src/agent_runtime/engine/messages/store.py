"""Append-only message storage with race-free sequence numbers.

Sequence numbers come from counters on the session row, advanced by one
`UPDATE ... RETURNING` in the same transaction as the inserts: the row lock it takes serialises
appends to one session in arrival order (no advisory locks, no max(seq)+1 race), and a rolled-back
append leaves no row behind (a gap in seq at worst, never a duplicate).
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID, uuid4

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import ConflictError
from agent_runtime.engine.messages.metadata import METADATA_ADAPTER
from agent_runtime.engine.messages.models import NewMessage, StoredMessage
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.sessions.models import build_session_title
from agent_runtime.engine.sessions.service import session_not_found

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


async def append_in_transaction(
    conn: asyncpg.Connection, ctx: RequestContext, session_id: UUID, messages: Sequence[NewMessage]
) -> list[StoredMessage]:
    """Append `messages` in order; the caller owns the transaction."""
    visible = sum(1 for m in messages if not m.is_audit)
    audit = len(messages) - visible
    first_user = next((m for m in messages if m.role == "user"), None)
    title = build_session_title(first_user.content) if first_user is not None else None
    counters = await conn.fetchrow(
        """
        UPDATE agent_chat_sessions
           SET next_seq = next_seq + $3, next_audit_seq = next_audit_seq - $4,
               title = COALESCE(title, $5), updated_at = now()
         WHERE id = $1 AND user_id = $2
        RETURNING next_seq - $3 AS first_seq, next_audit_seq + $4 AS first_audit_seq, billing_currency
        """,
        session_id,
        ctx.user_id,
        visible,
        audit,
        title,
    )
    if counters is None:
        raise session_not_found(session_id)
    next_visible: int = counters["first_seq"]
    next_audit: int = counters["first_audit_seq"]
    stored: list[StoredMessage] = []
    for message in messages:
        if message.is_audit:
            seq, next_audit = next_audit, next_audit - 1
        else:
            seq, next_visible = next_visible, next_visible + 1
        try:
            row = await conn.fetchrow(
                f"""
                INSERT INTO agent_chat_messages (id, session_id, user_id, message_id, seq, role, content, metadata,
                                                 input_tokens, output_tokens, cost, currency)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                RETURNING {COLUMNS}
                """,
                uuid4(),
                session_id,
                ctx.user_id,
                message.message_id,
                seq,
                message.role,
                message.content,
                message.metadata.model_dump(mode="json", exclude_none=True),
                message.input_tokens,
                message.output_tokens,
                message.cost,
                counters["billing_currency"],
            )
        except asyncpg.UniqueViolationError as exc:
            raise ConflictError(f"message id {message.message_id!r} is already stored in this session") from exc
        assert row is not None
        stored.append(row_to_message(row))
    return stored


class MessageStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def append(
        self, ctx: RequestContext, session_id: UUID, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        if not messages:
            return []
        async with self._pool.acquire() as conn, conn.transaction():
            return await append_in_transaction(conn, ctx, session_id, messages)

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
