"""Chat memory on PostgreSQL: a conversation is a session, its messages are the visible rows (seq > 0).

One repository per caller: every statement carries the caller's `user_id`, so a conversation id of
another user reads as empty and cannot be written. Appends go through the same seq allocation as the
rest of the engine (`messages.store.insert_messages`), so memory writes never rewrite rows and
never lose concurrent messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import ConflictError
from agent_runtime.engine.memory.errors import DuplicateMessageError, InvalidConversationIdError
from agent_runtime.engine.memory.messages import (
    AssistantMessage,
    ChatMessage,
    ChatMetadata,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agent_runtime.engine.memory.repository import WindowRead, validate_conversation_id
from agent_runtime.engine.messages.metadata import (
    METADATA_ADAPTER,
    AssistantOutputMetadata,
    MessageMetadata,
    SystemMetadata,
    ToolCallMetadata,
    ToolResultMetadata,
    UserInputMetadata,
)
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.messages.store import insert_messages
from agent_runtime.engine.pagination import Page

_COLUMNS = "message_id, seq, role, content, metadata, created_at"
_VISIBLE = "session_id = $1 AND user_id = $2 AND seq > 0"
# Three index-backed reads (idx_messages_session_seq_display, idx_messages_session_role_seq), each
# bounded, so the cost does not grow with the length of the conversation.
_WINDOW_SQL = f"""
WITH tail AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role <> 'system' ORDER BY seq DESC LIMIT $3
), sys AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role = 'system' ORDER BY seq DESC LIMIT 1
), anchor AS (
    SELECT {_COLUMNS} FROM agent_chat_messages
    WHERE {_VISIBLE} AND role = 'user' AND NOT EXISTS (SELECT 1 FROM tail WHERE tail.role = 'user')
    ORDER BY seq DESC LIMIT 1
)
SELECT * FROM sys UNION ALL SELECT * FROM anchor UNION ALL SELECT * FROM tail ORDER BY seq
"""


def to_new_message(message: ChatMessage) -> NewMessage:
    meta = message.metadata
    metadata: MessageMetadata
    if isinstance(message, SystemMessage):
        metadata = SystemMetadata()
    elif isinstance(message, UserMessage):
        metadata = UserInputMetadata(run_id=meta.run_id)
    elif isinstance(message, AssistantMessage) and message.tool_calls:
        metadata = ToolCallMetadata(
            tool_calls=message.tool_calls, run_id=meta.run_id, stage=meta.stage, model=meta.model
        )
    elif isinstance(message, AssistantMessage):
        metadata = AssistantOutputMetadata(run_id=meta.run_id, stage=meta.stage, model=meta.model)
    else:
        metadata = ToolResultMetadata(
            tool_call_id=message.tool_call_id, tool_name=message.name, is_error=message.is_error, run_id=meta.run_id
        )
    return NewMessage(role=message.role, content=message.content, metadata=metadata, message_id=message.id)


def row_to_chat_message(row: asyncpg.Record) -> ChatMessage:
    metadata = METADATA_ADAPTER.validate_python(row["metadata"])
    common = {"id": row["message_id"], "created_at": row["created_at"], "content": row["content"]}
    if isinstance(metadata, SystemMetadata):
        return SystemMessage(**common)
    if isinstance(metadata, UserInputMetadata):
        return UserMessage(**common, metadata=ChatMetadata(run_id=metadata.run_id))
    if isinstance(metadata, ToolCallMetadata):
        origin = ChatMetadata(run_id=metadata.run_id, stage=metadata.stage, model=metadata.model)
        return AssistantMessage(**common, tool_calls=metadata.tool_calls, metadata=origin)
    if isinstance(metadata, AssistantOutputMetadata):
        origin = ChatMetadata(run_id=metadata.run_id, stage=metadata.stage, model=metadata.model)
        return AssistantMessage(**common, metadata=origin)
    if isinstance(metadata, ToolResultMetadata):
        return ToolMessage(
            **common,
            tool_call_id=metadata.tool_call_id,
            name=metadata.tool_name,
            is_error=metadata.is_error,
            metadata=ChatMetadata(run_id=metadata.run_id),
        )
    # Audit rows have seq < 0 and are never selected; reaching this is a schema violation.
    raise ValueError(f"row {row['message_id']!r} with metadata kind {metadata.kind!r} is not a chat message")


def _session_id(conversation_id: str) -> UUID:
    validate_conversation_id(conversation_id)
    try:
        return UUID(conversation_id)
    except ValueError as exc:
        raise InvalidConversationIdError(f"conversation id must be a session UUID, got {conversation_id!r}") from exc


class PostgresChatMemoryRepository:
    """`ChatMemoryRepository` over `agent_chat_messages`, bound to one caller.

    Conversations are sessions: they must exist (created through the sessions API or engine) before
    messages are appended; appending to an unknown or foreign session raises NotFoundError.
    """

    def __init__(self, pool: asyncpg.Pool, ctx: RequestContext) -> None:
        self._pool = pool
        self._ctx = ctx

    async def find_conversation_ids(self, *, limit: int, offset: int = 0) -> Page[str]:
        where = (
            "s.user_id = $1 AND EXISTS (SELECT 1 FROM agent_chat_messages m "
            "WHERE m.session_id = s.id AND m.user_id = s.user_id AND m.seq > 0)"
        )
        async with self._pool.acquire() as conn:
            total = await conn.fetchval(f"SELECT count(*) FROM agent_chat_sessions s WHERE {where}", self._ctx.user_id)
            rows = await conn.fetch(
                f"SELECT s.id FROM agent_chat_sessions s WHERE {where} "
                "ORDER BY s.created_at DESC, s.id DESC LIMIT $2 OFFSET $3",
                self._ctx.user_id,
                limit,
                offset,
            )
        return Page[str](items=[str(r["id"]) for r in rows], total=total, limit=limit, offset=offset)

    async def find_by_conversation_id(self, conversation_id: str, *, max_messages: int) -> WindowRead:
        rows = await self._pool.fetch(_WINDOW_SQL, _session_id(conversation_id), self._ctx.user_id, max_messages)
        messages = [row_to_chat_message(r) for r in rows]
        system = next((m for m in messages if isinstance(m, SystemMessage)), None)
        return WindowRead(system=system, messages=[m for m in messages if not isinstance(m, SystemMessage)])

    async def append(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        session_id = _session_id(conversation_id)
        if not messages:
            return
        rows = [to_new_message(m) for m in messages]
        try:
            await insert_messages(self._pool, self._ctx, session_id, rows)
        except ConflictError as exc:
            raise DuplicateMessageError(exc.message) from exc

    async def delete_by_conversation_id(self, conversation_id: str) -> None:
        """Forget the conversation's messages; the session itself (title, billing) stays."""
        await self._pool.execute(
            "DELETE FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2",
            _session_id(conversation_id),
            self._ctx.user_id,
        )
