"""Short builders for test conversations, and a deterministic token counter."""

from __future__ import annotations

from collections.abc import Sequence

from agent_runtime.engine.conversation import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCallSpec,
    ToolMessage,
    UserMessage,
)


def sys_(id_: str, content: str = "You are helpful.") -> SystemMessage:
    return SystemMessage(id=id_, content=content)


def user(id_: str, content: str = "question") -> UserMessage:
    return UserMessage(id=id_, content=content)


def reply(id_: str, content: str = "answer") -> AssistantMessage:
    return AssistantMessage(id=id_, content=content)


def calls(id_: str, *call_ids: str, content: str = "") -> AssistantMessage:
    return AssistantMessage(
        id=id_,
        content=content,
        tool_calls=[ToolCallSpec(id=c, name="search", arguments=f'{{"q": "{c}"}}') for c in call_ids],
    )


def result(id_: str, call_id: str, content: str = "found") -> ToolMessage:
    return ToolMessage(id=id_, tool_call_id=call_id, content=content, name="search")


def char_tokens(message: ChatMessage) -> int:
    """One token per character of text and tool call, plus one for the message itself."""
    size = 1 + len(message.content)
    if isinstance(message, AssistantMessage):
        size += sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return size


def ids(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.id for m in messages]
