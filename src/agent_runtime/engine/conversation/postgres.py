"""Chat memory on PostgreSQL: a conversation is a session, its messages are the visible rows (seq > 0).

One repository per caller: every statement carries the caller's `user_id`, so a conversation id of
another user reads as empty and cannot be written. Appends go through the same seq allocation as the
rest of the engine (`store.insert_messages`), so memory writes never rewrite rows and
never lose concurrent messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg
from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.chat_messages import (
    AssistantMessage,
    ChatMessage,
    ChatMetadata,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agent_runtime.engine.conversation.errors import DuplicateMessageError, InvalidConversationIdError
from agent_runtime.engine.conversation.memory_repository import (
    WindowMark,
    WindowRead,
    validate_conversation_id,
)
from agent_runtime.engine.conversation.metadata import (
    METADATA_ADAPTER,
    AssistantOutputMetadata,
    MessageMetadata,
    SystemMetadata,
    ToolCallMetadata,
    ToolResultMetadata,
    UserInputMetadata,
)
from agent_runtime.engine.conversation.repository import BETWEEN_SQL, DELETE_CONVERSATION_SQL, SAVE_MARK_SQL, WINDOW_SQL
from agent_runtime.engine.conversation.store import insert_messages
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import BadRequestError, ConflictError


def to_new_message(message: ChatMessage) -> NewMessage:
    meta = message.metadata
    metadata: MessageMetadata
    if isinstance(message, SystemMessage):
        metadata = SystemMetadata()
    elif isinstance(message, UserMessage):
        metadata = UserInputMetadata(run_id=meta.run_id, images=message.images or None)
    elif isinstance(message, AssistantMessage) and message.tool_calls:
        metadata = ToolCallMetadata(
            tool_calls=message.tool_calls,
            run_id=meta.run_id,
            stage=meta.stage,
            model=meta.model,
            reasoning_content=message.reasoning_content,
        )
    elif isinstance(message, AssistantMessage):
        metadata = AssistantOutputMetadata(
            run_id=meta.run_id, stage=meta.stage, model=meta.model, reasoning_content=message.reasoning_content
        )
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
        return UserMessage(**common, images=metadata.images or [], metadata=ChatMetadata(run_id=metadata.run_id))
    if isinstance(metadata, ToolCallMetadata):
        origin = ChatMetadata(run_id=metadata.run_id, stage=metadata.stage, model=metadata.model)
        return AssistantMessage(
            **common, tool_calls=metadata.tool_calls, reasoning_content=metadata.reasoning_content, metadata=origin
        )
    if isinstance(metadata, AssistantOutputMetadata):
        origin = ChatMetadata(run_id=metadata.run_id, stage=metadata.stage, model=metadata.model)
        return AssistantMessage(**common, reasoning_content=metadata.reasoning_content, metadata=origin)
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


def _mark(row: asyncpg.Record) -> WindowMark:
    head_end = MarkHead.model_validate(row["metadata"])
    return WindowMark(
        start_id=row["message_id"], summary=row["content"] or None, head_end_id=head_end.head_end_message_id
    )


class MarkHead(BaseModel):
    """The mark row's metadata column in WINDOW_SQL: where its pinned head ends."""

    head_end_message_id: str | None = None


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

    async def find_by_conversation_id(self, conversation_id: str, *, max_messages: int) -> WindowRead:
        if max_messages < 1:
            raise BadRequestError("max_messages must be at least 1")
        session_id, user_id = _session_id(conversation_id), self._ctx.user_id
        rows = await self._pool.read(lambda conn: conn.fetch(WINDOW_SQL, session_id, user_id, max_messages))
        mark = next((_mark(r) for r in rows if r["part"] == "mark"), None)
        first_user = next((r["message_id"] for r in rows if r["part"] == "first_user"), None)
        system = next((row_to_chat_message(r) for r in rows if r["part"] == "system"), None)
        messages = [row_to_chat_message(r) for r in rows if r["part"] in ("anchor", "tail")]
        head = [row_to_chat_message(r) for r in rows if r["part"] == "head"]
        tail = sum(1 for r in rows if r["part"] == "tail")
        return WindowRead(
            system=system if isinstance(system, SystemMessage) else None,
            messages=messages,
            mark=mark,
            head=head,
            start_id=mark.start_id if mark is not None else first_user,
            complete=tail <= max_messages,
        )

    async def save_mark(self, conversation_id: str, mark: WindowMark) -> bool:
        stored = await self._pool.fetchval(
            SAVE_MARK_SQL,
            _session_id(conversation_id),
            self._ctx.user_id,
            mark.start_id,
            mark.summary,
            mark.head_end_id,
        )
        return stored is not None

    async def find_between(
        self, conversation_id: str, *, from_id: str | None, to_id: str, max_messages: int
    ) -> list[ChatMessage]:
        rows = await self._pool.fetch(
            BETWEEN_SQL, _session_id(conversation_id), self._ctx.user_id, from_id, to_id, max_messages
        )
        return [row_to_chat_message(r) for r in reversed(rows)]

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
        await self._pool.execute(DELETE_CONVERSATION_SQL, _session_id(conversation_id), self._ctx.user_id)
