"""Append-only message storage with race-free sequence numbers.

Sequence numbers come from counters on the session row, advanced by one
`UPDATE ... RETURNING` in the same transaction as the inserts: the row lock it takes serialises
appends to one session in arrival order (no advisory locks, no max(seq)+1 race), and a rolled-back
append leaves no row behind (a gap in seq at worst, never a duplicate).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.repository import (
    APPEND_SQL,
    COUNT_SUPERSEDED_SQL,
    COUNT_VISIBLE_SQL,
    IMAGE_SQL,
    LATEST_VISIBLE_SQL,
    PAGE_SUPERSEDED_SQL,
    PAGE_VISIBLE_SQL,
    SESSION_OWNED_SQL,
    row_to_message,
)
from agent_runtime.engine.conversation.stored_messages import NewMessage, StoredImage, StoredMessage
from agent_runtime.engine.errors import ConflictError, NotFoundError, session_not_found
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.text import storable

TITLE_MAX_LEN = 64
DEFAULT_TITLE = "新会话"


def build_session_title(first_user_input: str, max_len: int = TITLE_MAX_LEN) -> str:
    """Seed rule: trim, newlines to spaces, cut to 64 chars, fall back to "新会话". Here, not in engine/sessions:
    a session gets its title from its first user message, when that message is appended."""
    normalized = " ".join(first_user_input.strip().splitlines()).strip()
    return normalized[:max_len].strip() or DEFAULT_TITLE


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
            APPEND_SQL, session_id, ctx.user_id, batch.visible, batch.audit, batch.title, *batch.arrays()
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

    async def list_visible(
        self, ctx: RequestContext, session_id: UUID, *, limit: int, offset: int, superseded: bool = False
    ) -> Page[StoredMessage]:
        """The visible thread; `superseded`: instead, the rows regenerations replaced (audit now, still billed)."""
        count_sql, page_sql = (
            (COUNT_SUPERSEDED_SQL, PAGE_SUPERSEDED_SQL) if superseded else (COUNT_VISIBLE_SQL, PAGE_VISIBLE_SQL)
        )

        async def read(conn: asyncpg.Connection) -> Page[StoredMessage]:
            if await conn.fetchval(SESSION_OWNED_SQL, session_id, ctx.user_id) is None:
                raise session_not_found(session_id)
            total = await conn.fetchval(count_sql, session_id, ctx.user_id)
            rows = await conn.fetch(page_sql, session_id, ctx.user_id, limit, offset)
            items = [row_to_message(r).for_client() for r in rows]
            return Page[StoredMessage](items=items, total=total, limit=limit, offset=offset)

        page: Page[StoredMessage] = await self._pool.read(read)
        return page

    async def image(self, ctx: RequestContext, session_id: UUID, image_id: str) -> StoredImage:
        """An inline image of one of the caller's sessions (its type and bytes); 404 for anyone else's."""
        row = await self._pool.fetchrow(IMAGE_SQL, session_id, ctx.user_id, image_id)
        if row is None:
            raise NotFoundError("image not found")
        return StoredImage(mime_type=row["mime_type"], data=base64.b64decode(row["data"]))

    async def latest_visible(self, ctx: RequestContext, session_id: UUID, *, limit: int) -> list[StoredMessage]:
        """The newest `limit` visible messages, oldest first (one index-backed read; no ownership error)."""
        rows = await self._pool.read(lambda conn: conn.fetch(LATEST_VISIBLE_SQL, session_id, ctx.user_id, limit))
        return [row_to_message(r) for r in rows]
