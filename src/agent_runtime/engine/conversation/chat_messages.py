"""Typed chat messages: the one in-memory shape of a conversation, converted at the edges (convert.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Literal
from uuid import uuid4

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from agent_runtime.engine.conversation.metadata import ImageAttachment, ToolCallSpec
from agent_runtime.engine.llm.vision import image_marker

__all__ = [
    "CHAT_MESSAGE_ADAPTER",
    "TURN_SEPARATOR",
    "AssistantMessage",
    "ChatMessage",
    "ChatMetadata",
    "ImageAttachment",
    "SystemMessage",
    "ToolCallSpec",
    "ToolMessage",
    "UserMessage",
    "image_marker",
    "merge_consecutive_users",
    "user_text",
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
    images: list[ImageAttachment] = Field(default_factory=list)


def user_text(message: UserMessage) -> str:
    """The message's text with a marker per image after it: what the flow's stages carry (llm/vision.py)."""
    markers = "".join(image_marker(image.id) for image in message.images)
    return message.content + markers


class AssistantMessage(_Message):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    reasoning_content: str | None = Field(
        default=None,
        description="The model's reasoning for this message (thinking mode), kept with it: DeepSeek's thinking mode "
        "wants it back on every earlier assistant message of a request with tools (400 otherwise).",
    )

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


# Between the texts of consecutive user messages joined into one.
TURN_SEPARATOR = "\n\n"


def merge_consecutive_users(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """`messages` with each run of consecutive user messages joined into one (with the last one's id): no provider
    sees two user messages in a row (some refuse them), and the same stored messages always give the same bytes."""
    merged: list[ChatMessage] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if isinstance(message, UserMessage) and isinstance(previous, UserMessage):
            joined = previous.content + TURN_SEPARATOR + message.content
            merged[-1] = message.model_copy(update={"content": joined, "images": [*previous.images, *message.images]})
        else:
            merged.append(message)
    return merged
