"""Typed chat messages: the one in-memory shape of a conversation, converted at the edges (convert.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal
from uuid import uuid4

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from agent_runtime.engine.messages.metadata import ToolCallSpec

__all__ = [
    "CHAT_MESSAGE_ADAPTER",
    "AssistantMessage",
    "ChatMessage",
    "ChatMetadata",
    "SystemMessage",
    "ToolCallSpec",
    "ToolMessage",
    "UserMessage",
]


class ChatMetadata(BaseModel):
    """Where a message came from. Structural facts (tool calls, results) live on the message itself."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None
    stage: str | None = None
    model: str | None = None


def _new_id() -> str:
    return str(uuid4())


def _now() -> datetime:
    return datetime.now(UTC)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Same bounds as agent_chat_messages.message_id, so anything held here can be stored.
    id: str = Field(default_factory=_new_id, min_length=1, max_length=200)
    created_at: AwareDatetime = Field(default_factory=_now)
    metadata: ChatMetadata = Field(default_factory=ChatMetadata)


class SystemMessage(_Message):
    role: Literal["system"] = "system"
    content: str


class UserMessage(_Message):
    role: Literal["user"] = "user"
    content: str


class AssistantMessage(_Message):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_tool_call_ids(self) -> AssistantMessage:
        ids = [call.id for call in self.tool_calls]
        if len(ids) != len(set(ids)):
            raise ValueError("tool call ids must be unique within one assistant message")
        return self


class ToolMessage(_Message):
    role: Literal["tool"] = "tool"
    tool_call_id: str = Field(min_length=1)
    content: str
    name: str | None = None
    is_error: bool = False


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]

CHAT_MESSAGE_ADAPTER: TypeAdapter[ChatMessage] = TypeAdapter(ChatMessage)
