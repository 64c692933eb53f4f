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
from agent_runtime.engine.errors import BadRequestError, ConflictError
from agent_runtime.engine.memory.errors import DuplicateMessageError, InvalidConversationIdError
from agent_runtime.engine.memory.messages import (
    AssistantMessage,
    ChatMessage,
    ChatMetadata,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agent_runtime.engine.memory.repository import WindowMark, WindowRead, validate_conversation_id
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

_COLUMNS = "message_id, seq, role, content, metadata, created_at"
_VISIBLE = "session_id = $1 AND user_id = $2 AND seq > 0"
# One statement of bounded index reads: the newest mark (primary key of agent_memory_windows); before any cut,
# the first user message instead; the newest `$3` + 1 non-system messages from that start (one more than asked,
# to know whether there are more; idx_messages_session_seq_display); the newest system message and, when that
# tail has no user message, the newest user message (idx_messages_session_role_seq). The mark (or first user
# message) comes back as a row of its own (seq = start, message_id = start id, content = summary), so a run's
# memory costs one round trip however the window was cut.
_WINDOW_SQL = f"""
WITH mark AS (
    SELECT start_seq, start_message_id, summary FROM agent_memory_windows
    WHERE session_id = $1 AND user_id = $2 ORDER BY start_seq DESC LIMIT 1
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
UNION ALL
SELECT 'mark', start_message_id, start_seq, 'system', COALESCE(summary, ''), NULL::jsonb, NULL::timestamptz FROM mark
UNION ALL
SELECT 'first_user', message_id, seq, 'user', '', NULL::jsonb, NULL::timestamptz FROM first_user
ORDER BY 3
"""
# Stored only when the start is a visible user message after the current mark's start: marks only move forward,
# and two processes storing the same cut store it once (the primary key).
_SAVE_MARK_SQL = """
INSERT INTO agent_memory_windows (session_id, user_id, start_seq, start_message_id, summary)
SELECT m.session_id, m.user_id, m.seq, m.message_id, $4 FROM agent_chat_messages m
WHERE m.session_id = $1 AND m.user_id = $2 AND m.message_id = $3 AND m.seq > 0 AND m.role = 'user'
  AND m.seq > COALESCE((SELECT max(w.start_seq) FROM agent_memory_windows w
                        WHERE w.session_id = $1 AND w.user_id = $2), 0)
ON CONFLICT DO NOTHING
RETURNING start_seq
"""
_BETWEEN_SQL = f"""
SELECT {_COLUMNS} FROM agent_chat_messages
WHERE {_VISIBLE} AND role <> 'system'
  AND seq >= COALESCE((SELECT seq FROM agent_chat_messages WHERE {_VISIBLE} AND message_id = $3), 1)
  AND seq < (SELECT seq FROM agent_chat_messages WHERE {_VISIBLE} AND message_id = $4)
ORDER BY seq DESC LIMIT $5
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
            tool_calls=message.tool_calls,
            run_id=meta.run_id,
            stage=meta.stage,
            model=meta.model,
            reasoning_content=message.reasoning_content,
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
        return AssistantMessage(
            **common, tool_calls=metadata.tool_calls, reasoning_content=metadata.reasoning_content, metadata=origin
        )
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


def _mark(row: asyncpg.Record) -> WindowMark:
    return WindowMark(start_id=row["message_id"], summary=row["content"] or None)


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
        rows = await self._pool.fetch(_WINDOW_SQL, _session_id(conversation_id), self._ctx.user_id, max_messages)
        mark = next((_mark(r) for r in rows if r["part"] == "mark"), None)
        first_user = next((r["message_id"] for r in rows if r["part"] == "first_user"), None)
        system = next((row_to_chat_message(r) for r in rows if r["part"] == "system"), None)
        messages = [row_to_chat_message(r) for r in rows if r["part"] in ("anchor", "tail")]
        tail = sum(1 for r in rows if r["part"] == "tail")
        return WindowRead(
            system=system if isinstance(system, SystemMessage) else None,
            messages=messages,
            mark=mark,
            start_id=mark.start_id if mark is not None else first_user,
            complete=tail <= max_messages,
        )

    async def save_mark(self, conversation_id: str, mark: WindowMark) -> bool:
        stored = await self._pool.fetchval(
            _SAVE_MARK_SQL, _session_id(conversation_id), self._ctx.user_id, mark.start_id, mark.summary
        )
        return stored is not None

    async def find_between(
        self, conversation_id: str, *, from_id: str | None, to_id: str, max_messages: int
    ) -> list[ChatMessage]:
        rows = await self._pool.fetch(
            _BETWEEN_SQL, _session_id(conversation_id), self._ctx.user_id, from_id, to_id, max_messages
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
        # The marks go too: a summary of deleted messages must not outlive them.
        await self._pool.execute(
            "WITH marks AS (DELETE FROM agent_memory_windows WHERE session_id = $1 AND user_id = $2) "
            "DELETE FROM agent_chat_messages WHERE session_id = $1 AND user_id = $2",
            _session_id(conversation_id),
            self._ctx.user_id,
        )
