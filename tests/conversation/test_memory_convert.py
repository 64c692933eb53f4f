from __future__ import annotations

from typing import Any

import ag_ui.core as agui
import pytest
from pydantic import TypeAdapter

from agent_runtime.engine.conversation import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCallSpec,
    ToolMessage,
    UnrepresentableMessageError,
    UserMessage,
    from_agui,
    from_wire,
    to_agui,
    to_wire,
)
from agent_runtime.engine.llm.litellm_import import load_litellm

# Arguments exactly as a model may emit them: odd spacing, unicode, nesting; they must survive untouched.
ARGS = '{"query":  "天气 上海", "filters": {"days": [1, 2]}, "note": "a \\"quoted\\" word"}'
TOOL_CALLS = [
    ToolCallSpec(id="call_1", name="weather", arguments=ARGS),
    ToolCallSpec(id="call_2", name="t", arguments="{}"),
]

MESSAGES: list[ChatMessage] = [
    SystemMessage(id="m-sys", content="You are helpful."),
    UserMessage(id="m-user", content="上海天气?"),
    AssistantMessage(id="m-call", content="", tool_calls=TOOL_CALLS),
    AssistantMessage(id="m-call-text", content="Let me check.", tool_calls=TOOL_CALLS[:1]),
    ToolMessage(id="m-tool", tool_call_id="call_1", content='{"temp": 21}'),
    AssistantMessage(id="m-answer", content="21°C."),
    AssistantMessage(id="m-empty", content=""),
]


def structure(message: ChatMessage) -> dict[str, Any]:
    return message.model_dump(exclude={"id", "created_at"})


def test_to_wire_payloads() -> None:
    assert [to_wire(m) for m in MESSAGES[:4]] + [to_wire(MESSAGES[4])] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "上海天气?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ARGS}},
                {"id": "call_2", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ARGS}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    named = ToolMessage(tool_call_id="call_1", content="x", name="weather", is_error=True)
    assert to_wire(named) == {"role": "tool", "tool_call_id": "call_1", "content": "x", "name": "weather"}


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.id)
def test_wire_round_trip_keeps_everything_the_wire_can_carry(message: ChatMessage) -> None:
    assert structure(from_wire(to_wire(message))) == structure(message)


def test_from_wire_reads_a_litellm_response_message() -> None:
    litellm = load_litellm()
    raw = litellm.Message(
        role="assistant",
        content=None,
        tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ARGS}}],
    ).model_dump()
    parsed = from_wire(raw)
    assert isinstance(parsed, AssistantMessage)
    assert structure(parsed) == structure(AssistantMessage(content="", tool_calls=TOOL_CALLS[:1]))


@pytest.mark.parametrize(
    "raw",
    [
        {"role": "tool", "content": "x"},
        {"role": "developer", "content": "x"},
        {"role": "function", "name": "f", "content": "x"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]},
        {"role": "user", "content": None},
        {"role": "user", "content": "x", "name": "alice"},
        {"role": "assistant", "content": "x", "tool_call_id": "call_1"},
        {"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}]},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "", "arguments": "{}"}}]},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "custom", "function": {"name": "f", "arguments": ""}}],
        },
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
    ],
)
def test_from_wire_refuses_what_it_cannot_store(raw: dict[str, object]) -> None:
    with pytest.raises(UnrepresentableMessageError):
        from_wire(raw)


def test_to_agui_payloads() -> None:
    dumped = [to_agui(m).model_dump(by_alias=True, exclude_none=True) for m in MESSAGES[1:3]]
    error = to_agui(ToolMessage(id="m-err", tool_call_id="call_2", content="timeout", is_error=True))
    assert dumped == [
        {"id": "m-user", "role": "user", "content": "上海天气?"},
        {
            "id": "m-call",
            "role": "assistant",
            "toolCalls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ARGS}},
                {"id": "call_2", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            ],
        },
    ]
    assert error.model_dump(by_alias=True, exclude_none=True) == {
        "id": "m-err",
        "role": "tool",
        "content": "timeout",
        "toolCallId": "call_2",
        "error": "timeout",
    }


@pytest.mark.parametrize(
    "message",
    [*MESSAGES, ToolMessage(id="m-err", tool_call_id="call_2", content="timeout", is_error=True)],
    ids=lambda m: m.id,
)
def test_agui_round_trip_keeps_ids_and_tool_calls(message: ChatMessage) -> None:
    back = from_agui(to_agui(message))
    assert back.model_dump(exclude={"created_at"}) == message.model_dump(exclude={"created_at"})


def test_from_agui_reads_client_json() -> None:
    raw = {
        "id": "a1",
        "role": "assistant",
        "toolCalls": [{"id": "call_1", "function": {"name": "weather", "arguments": ARGS}}],
    }
    message: agui.Message = TypeAdapter(agui.Message).validate_python(raw)
    parsed = from_agui(message)
    assert parsed.model_dump(exclude={"created_at"}) == AssistantMessage(id="a1", tool_calls=TOOL_CALLS[:1]).model_dump(
        exclude={"created_at"}
    )


def test_from_agui_joins_text_parts_and_reads_tool_errors() -> None:
    user = agui.UserMessage(id="u1", content=[agui.TextPart(text="line one"), agui.TextPart(text="line two")])
    failed = agui.ToolMessage(id="t1", tool_call_id="call_1", content="", error="boom")
    assert [m.model_dump(exclude={"created_at"}) for m in (from_agui(user), from_agui(failed))] == [
        UserMessage(id="u1", content="line one\nline two").model_dump(exclude={"created_at"}),
        ToolMessage(id="t1", tool_call_id="call_1", content="boom", is_error=True).model_dump(exclude={"created_at"}),
    ]


@pytest.mark.parametrize(
    "message",
    [
        agui.DeveloperMessage(id="d", content="x"),
        agui.ActivityMessage(id="x", activity_type="progress", content={"step": 1}),
        agui.ReasoningMessage(id="r", content="thinking"),
        agui.UserMessage(id="u", content="x", name="alice"),
        agui.AssistantMessage(id="a", content="x", encrypted_value="opaque"),
        agui.AssistantMessage(
            id="a",
            tool_calls=[
                agui.ToolCall(id="c", function=agui.FunctionCall(name="f", arguments="{}"), encrypted_value="e")
            ],
        ),
        agui.UserMessage(id="u", content=[agui.ImagePart(source={"type": "url", "value": "http://x/a.png"})]),
        agui.ToolMessage(id="t", tool_call_id="c", content="partial output", error="boom"),
        agui.AssistantMessage(
            id="a", tool_calls=[agui.ToolCall(id="c", function=agui.FunctionCall(name="", arguments=""))]
        ),
    ],
    ids=lambda m: f"{m.role}-{m.id}",
)
def test_from_agui_refuses_what_it_cannot_store(message: agui.Message) -> None:
    with pytest.raises(UnrepresentableMessageError):
        from_agui(message)


def test_tool_name_is_not_carried_by_agui() -> None:
    named = ToolMessage(id="t1", tool_call_id="call_1", content="x", name="weather")
    back = from_agui(to_agui(named))
    assert isinstance(back, ToolMessage)
    assert back.name is None
