"""The thread as a client sees it: the visible stored messages, as chat messages (for MESSAGES_SNAPSHOT)."""

from __future__ import annotations

from uuid import UUID

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.chat_messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agent_runtime.engine.conversation.metadata import (
    AssistantOutputMetadata,
    SystemMetadata,
    ToolCallMetadata,
    ToolResultMetadata,
    UserInputMetadata,
)
from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.conversation.stored_messages import StoredMessage

# As many as one page of `GET /v1/sessions/{id}/messages` can hold (limit <= 100), so a snapshot always
# equals one page of that list; a longer thread's older messages are read from the list endpoint.
SNAPSHOT_MAX_MESSAGES = 100


def stored_to_chat(row: StoredMessage) -> ChatMessage:
    common = {"id": row.message_id, "created_at": row.created_at, "content": row.content}
    match row.metadata:
        case UserInputMetadata(images=images):
            return UserMessage(**common, images=images or [])
        case ToolCallMetadata(tool_calls=calls):
            return AssistantMessage(**common, tool_calls=calls)
        case AssistantOutputMetadata():
            return AssistantMessage(**common)
        case ToolResultMetadata(tool_call_id=call_id, tool_name=name, is_error=is_error):
            return ToolMessage(**common, tool_call_id=call_id, name=name, is_error=is_error)
        case SystemMetadata():
            return SystemMessage(**common)
    raise ValueError(f"message {row.message_id!r} ({row.metadata.kind}) is not visible")


async def visible_thread(store: MessageStore, ctx: RequestContext, session_id: UUID) -> list[ChatMessage]:
    rows = await store.latest_visible(ctx, session_id, limit=SNAPSHOT_MAX_MESSAGES)
    return [stored_to_chat(row) for row in rows]
