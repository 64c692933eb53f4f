"""The only conversions between our messages and the LLM wire format or AG-UI: one function per direction.

Anything that cannot be held without loss raises `UnrepresentableMessageError`; nothing is dropped quietly.
Deliberate, documented losses:
- The wire format has no ids, timestamps, metadata or error flag: `from_wire` creates fresh ids, and a tool
  error reaches the model through the result's content only.
- AG-UI's tool message has no `name` (the tool's name is on the assistant tool call with the same id).
  AG-UI's free-form `metadata` and `subagentRunId` are transport annotations and are not stored.
- AG-UI content given as parts is accepted when every part is text (joined with newlines); any other part
  (image, audio, ...) is refused here: a run's input takes image parts itself (engine/runs/request/images.py).
- A user message's images reach the wire as markers in its text (`user_text`), swapped for image parts by the
  run's gateway; in AG-UI they are `image` parts: an https URL as given, inline data by the URL of the
  authenticated endpoint that serves it (`image_path`), never the bytes (a snapshot would carry every image).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import ag_ui.core as agui
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from agent_runtime.engine.conversation.chat_messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCallSpec,
    ToolMessage,
    UserMessage,
    user_text,
)
from agent_runtime.engine.conversation.errors import UnrepresentableMessageError
from agent_runtime.engine.conversation.stored_messages import image_path

AguiMessage = agui.SystemMessage | agui.UserMessage | agui.AssistantMessage | agui.ToolMessage


class _WireFunction(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    arguments: str


class _WireToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: _WireFunction


class _WireMessage(BaseModel):
    # Providers add their own keys (provider_specific_fields, ...): not part of the chat-completions message
    # contract, so they are ignored rather than refused.
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[_WireToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    function_call: None = None
    reasoning_content: str | None = None


def to_wire(message: ChatMessage) -> dict[str, JsonValue]:
    """An OpenAI-style chat message dict, as LiteLLM and CrewAI take it."""
    wire: dict[str, JsonValue]
    match message:
        case AssistantMessage(tool_calls=calls) if calls:
            wire = {
                "role": "assistant",
                # Providers expect null, not "", next to tool calls when the model said nothing.
                "content": message.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in calls
                ],
            }
            return _with_reasoning(wire, message)
        case ToolMessage():
            wire = {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
            if message.name is not None:
                wire["name"] = message.name
            return wire
        case UserMessage():
            return {"role": "user", "content": user_text(message)}
        case AssistantMessage():
            return _with_reasoning({"role": "assistant", "content": message.content}, message)
        case _:
            return {"role": message.role, "content": message.content}


def _with_reasoning(wire: dict[str, JsonValue], message: AssistantMessage) -> dict[str, JsonValue]:
    """A thinking model's reasoning goes back with the message it gave: DeepSeek's thinking mode answers 400 to a
    request with tools whose earlier assistant messages lack theirs (api-docs.deepseek.com, thinking mode guide)."""
    if message.reasoning_content is not None:
        wire["reasoning_content"] = message.reasoning_content
    return wire


def from_wire(raw: Mapping[str, object]) -> ChatMessage:
    """Parse one OpenAI-style chat message dict (e.g. a LiteLLM response message dumped to a dict)."""
    try:
        return _from_wire(_WireMessage.model_validate(dict(raw)))
    except ValidationError as exc:
        raise UnrepresentableMessageError(f"cannot read a chat message from the wire format: {exc}") from exc


def _from_wire(wire: _WireMessage) -> ChatMessage:
    if wire.role != "tool" and wire.name is not None:
        raise UnrepresentableMessageError(f"a {wire.role} message with a participant name cannot be stored")
    if wire.role != "assistant" and wire.tool_calls:
        raise UnrepresentableMessageError(f"a {wire.role} message cannot carry tool calls")
    if wire.role != "tool" and wire.tool_call_id is not None:
        raise UnrepresentableMessageError(f"a {wire.role} message cannot answer a tool call")
    match wire.role:
        case "system":
            return SystemMessage(content=_required_content(wire))
        case "user":
            return UserMessage(content=_required_content(wire))
        case "assistant":
            calls = [
                ToolCallSpec(id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in wire.tool_calls or []
            ]
            reasoning = wire.reasoning_content
            return AssistantMessage(content=wire.content or "", tool_calls=calls, reasoning_content=reasoning)
        case "tool":
            if not wire.tool_call_id:
                raise UnrepresentableMessageError("a tool message without tool_call_id cannot be stored")
            return ToolMessage(tool_call_id=wire.tool_call_id, content=_required_content(wire), name=wire.name)


def _required_content(wire: _WireMessage) -> str:
    if wire.content is None:
        raise UnrepresentableMessageError(f"a {wire.role} message needs text content")
    return wire.content


def agui_parts(message: UserMessage, session_id: str) -> str | list[agui.InputContentPart]:
    if not message.images:
        return message.content
    parts: list[agui.InputContentPart] = [agui.TextPart(type="text", text=message.content)] if message.content else []
    for image in message.images:
        url = image.url if image.data is None else image_path(session_id, image.id)
        source = agui.InputContentUrlSource(type="url", value=str(url), mime_type=image.mime_type)
        parts.append(agui.ImageInputContent(type="image", id=image.id, source=source))
    return parts


def to_agui(message: ChatMessage, *, session_id: str = "") -> AguiMessage:
    """The AG-UI model of a message (for MESSAGES_SNAPSHOT events and message lists); `session_id` names the
    endpoint of its inline images."""
    match message:
        case SystemMessage():
            return agui.SystemMessage(id=message.id, content=message.content)
        case UserMessage():
            return agui.UserMessage(id=message.id, content=agui_parts(message, session_id))
        case AssistantMessage():
            calls = [
                agui.ToolCall(id=c.id, function=agui.FunctionCall(name=c.name, arguments=c.arguments))
                for c in message.tool_calls
            ]
            return agui.AssistantMessage(id=message.id, content=message.content or None, tool_calls=calls or None)
        case ToolMessage():
            return agui.ToolMessage(
                id=message.id,
                content=message.content,
                tool_call_id=message.tool_call_id,
                error=message.content if message.is_error else None,
            )


def from_agui(message: agui.Message) -> ChatMessage:
    """Our message for an AG-UI message (e.g. from `RunAgentInput.messages`); the AG-UI id is kept."""
    try:
        return _from_agui(message)
    except ValidationError as exc:
        raise UnrepresentableMessageError(f"cannot read AG-UI message {message.id!r}: {exc}") from exc


def _from_agui(message: agui.Message) -> ChatMessage:
    if isinstance(message, agui.DeveloperMessage | agui.ActivityMessage | agui.ReasoningMessage):
        raise UnrepresentableMessageError(f"an AG-UI {message.role} message cannot be stored in chat memory")
    _refuse_opaque(message)
    match message:
        case agui.SystemMessage():
            return SystemMessage(id=message.id, content=message.content)
        case agui.UserMessage():
            return UserMessage(id=message.id, content=_agui_text(message.content, message.role))
        case agui.AssistantMessage():
            calls = [_agui_tool_call(c) for c in message.tool_calls or []]
            return AssistantMessage(id=message.id, content=message.content or "", tool_calls=calls)
        case agui.ToolMessage():
            return _agui_tool_message(message)


def _refuse_opaque(message: AguiMessage) -> None:
    if getattr(message, "encrypted_value", None) is not None:
        raise UnrepresentableMessageError(f"an encrypted AG-UI {message.role} message cannot be stored")
    if getattr(message, "name", None) is not None:
        raise UnrepresentableMessageError(f"an AG-UI {message.role} message with a participant name cannot be stored")


def _agui_tool_call(call: agui.ToolCall) -> ToolCallSpec:
    if call.encrypted_value is not None:
        raise UnrepresentableMessageError(f"the encrypted AG-UI tool call {call.id!r} cannot be stored")
    return ToolCallSpec(id=call.id, name=call.function.name, arguments=call.function.arguments)


def _agui_tool_message(message: agui.ToolMessage) -> ToolMessage:
    content = _agui_text(message.content, message.role)
    error = message.error
    if error is not None and content and error != content:
        raise UnrepresentableMessageError(
            f"AG-UI tool message {message.id!r} has both content and a different error text; only one is stored"
        )
    return ToolMessage(
        id=message.id,
        tool_call_id=message.tool_call_id,
        content=content or (error or ""),
        is_error=error is not None,
    )


def _agui_text(content: str | list[agui.InputContentPart], role: str) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if not isinstance(part, agui.TextPart):
            raise UnrepresentableMessageError(f"an AG-UI {role} message with {part.type} content cannot be stored")
        texts.append(part.text)
    return "\n".join(texts)
