"""The AG-UI mapper covers every run event: each member of the `RunEvent` union maps, to the events pinned here
(a dropped case fails here at once, as it fails mypy, instead of in the one run that emits that event)."""

from __future__ import annotations

import typing

from agent_runtime.engine.conversation.chat_messages import UserMessage
from agent_runtime.engine.runs.agui.mapper import to_agui
from agent_runtime.engine.runs.events.types import (
    MessagesSnapshot,
    ModelUsage,
    Notice,
    PatchOperation,
    PendingInterrupt,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunStarted,
    StageFinished,
    StageStarted,
    StateDelta,
    StateSnapshot,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallRequested,
    ToolResultReady,
)

_INTERRUPT = PendingInterrupt(
    id="approve-c1", tool_call_id="c1", tool_name="update_profile", arguments="{}", arguments_schema={}
)
_USAGE = ModelUsage(model="deepseek/deepseek-chat", input_tokens=3, output_tokens=2, cached_input_tokens=None)

# One example of every run event, and the AG-UI event types it becomes, in order.
EXAMPLES: list[tuple[RunEvent, list[str]]] = [
    (RunStarted(), ["RUN_STARTED"]),
    (MessagesSnapshot(messages=[UserMessage(id="u1", content="hi")]), ["MESSAGES_SNAPSHOT"]),
    (StateSnapshot(state={"status": "running"}), ["STATE_SNAPSHOT"]),
    (StateDelta(operations=[PatchOperation(op="replace", path="/status", value="done")]), ["STATE_DELTA"]),
    (StageStarted(stage="intent"), ["STEP_STARTED"]),
    (StageFinished(stage="intent"), ["STEP_FINISHED"]),
    (TextStarted(message_id="m1"), ["TEXT_MESSAGE_START"]),
    (TextDelta(message_id="m1", text="hi"), ["TEXT_MESSAGE_CONTENT"]),
    (TextEnded(message_id="m1"), ["TEXT_MESSAGE_END"]),
    (ReasoningStarted(message_id="r1"), ["REASONING_START", "REASONING_MESSAGE_START"]),
    (ReasoningDelta(message_id="r1", text="hmm"), ["REASONING_MESSAGE_CONTENT"]),
    (ReasoningEnded(message_id="r1"), ["REASONING_MESSAGE_END", "REASONING_END"]),
    (
        ToolCallRequested(
            tool_call_id="c1", name="calculator", arguments='{"expression": "1+1"}', parent_message_id="m1"
        ),
        ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"],
    ),
    (
        ToolCallRequested(tool_call_id="c2", name="now", arguments="", parent_message_id=None),
        ["TOOL_CALL_START", "TOOL_CALL_END"],
    ),
    (ToolResultReady(message_id="t1", tool_call_id="c1", content="2"), ["TOOL_CALL_RESULT"]),
    (Notice(name="run_cost", value={"cost": "0.01"}), ["CUSTOM"]),
    (RunFinished(usage=[_USAGE], interrupts=[_INTERRUPT]), ["RUN_FINISHED"]),
    (RunFailed(code="llm_timeout", message="the model did not answer"), ["RUN_ERROR"]),
]


def test_every_run_event_has_an_example() -> None:
    (union, _discriminator) = typing.get_args(RunEvent)
    assert {type(event) for event, _ in EXAMPLES} == set(typing.get_args(union))


def test_every_run_event_maps_to_its_agui_events() -> None:
    mapped = [[e.type.value for e in to_agui(event, thread_id="t", run_id="r")] for event, _ in EXAMPLES]
    assert mapped == [expected for _, expected in EXAMPLES]
