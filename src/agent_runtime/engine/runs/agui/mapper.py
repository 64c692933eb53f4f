"""The one place run events become AG-UI events (official `ag-ui-protocol` models), and their one exit.

`to_agui` maps one protocol-neutral run event (run_events.py) to the AG-UI events that say it;
`AguiStream.publish` is the single function every AG-UI event of a run leaves through (a durable per-run
event log attaches there), and `stream()` hands them to the HTTP response in order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import singledispatch

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic import JsonValue

from agent_runtime.engine.memory.convert import to_agui as message_to_agui
from agent_runtime.engine.runs.events.log import LoggedEvent, RunEventLog
from agent_runtime.engine.runs.events.types import (
    MessagesSnapshot,
    ModelUsage,
    Notice,
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
from agent_runtime.engine.runs.lease.repository import (
    ERROR_CODE_SLOT,
    ERROR_ID_SLOT,
    RUN_ID_SLOT,
    THREAD_ID_SLOT,
    LogEndings,
)

INTERRUPT_REASON = "tool_approval"


def _usage(usage: ModelUsage) -> TokenUsage:
    return TokenUsage(
        provider=usage.model.split("/", 1)[0],
        model=usage.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
    )


def _arguments(text: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(text or "{}")
    except ValueError:
        return text
    return value


def _interrupt(pending: PendingInterrupt) -> Interrupt:
    return Interrupt(
        id=pending.id,
        reason=INTERRUPT_REASON,
        message=f"Allow the assistant to run {pending.tool_name}?",
        tool_call_id=pending.tool_call_id,
        # What a resume may carry: {"arguments": {...}} replaces the model's arguments (validated).
        response_schema={
            "type": "object",
            "properties": {"arguments": pending.arguments_schema},
            "additionalProperties": False,
        },
        metadata={"toolName": pending.tool_name, "arguments": _arguments(pending.arguments)},
    )


def _finished(event: RunFinished, thread_id: str, run_id: str) -> RunFinishedEvent:
    outcome: RunFinishedInterruptOutcome | RunFinishedSuccessOutcome | RunFinishedCancelledOutcome | None = None
    if event.cancelled:
        outcome = RunFinishedCancelledOutcome()
    elif event.interrupts:
        outcome = RunFinishedInterruptOutcome(interrupts=[_interrupt(i) for i in event.interrupts])
    elif event.pending_tool_call_ids:
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=event.pending_tool_call_ids)
    # An absent outcome means success (AG-UI 1.0): a plain completed run carries none.
    return RunFinishedEvent(
        thread_id=thread_id, run_id=run_id, outcome=outcome, usage=[_usage(u) for u in event.usage] or None
    )


@dataclass(frozen=True)
class _Run:
    thread_id: str
    run_id: str


@singledispatch
def _map(event: object, run: _Run) -> list[BaseEvent]:
    raise TypeError(f"no AG-UI mapping for {type(event).__name__}")


@_map.register
def _(event: RunStarted, run: _Run) -> list[BaseEvent]:
    return [RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id)]


@_map.register
def _(event: MessagesSnapshot, run: _Run) -> list[BaseEvent]:
    return [MessagesSnapshotEvent(messages=[message_to_agui(m) for m in event.messages])]


@_map.register
def _(event: StateSnapshot, run: _Run) -> list[BaseEvent]:
    return [StateSnapshotEvent(snapshot=event.state)]


@_map.register
def _(event: StateDelta, run: _Run) -> list[BaseEvent]:
    return [StateDeltaEvent(delta=[o.model_dump() for o in event.operations])]


@_map.register
def _(event: StageStarted, run: _Run) -> list[BaseEvent]:
    return [StepStartedEvent(step_name=event.stage)]


@_map.register
def _(event: StageFinished, run: _Run) -> list[BaseEvent]:
    return [StepFinishedEvent(step_name=event.stage)]


@_map.register
def _(event: TextStarted, run: _Run) -> list[BaseEvent]:
    return [TextMessageStartEvent(message_id=event.message_id, role="assistant")]


@_map.register
def _(event: TextDelta, run: _Run) -> list[BaseEvent]:
    return [TextMessageContentEvent(message_id=event.message_id, delta=event.text)]


@_map.register
def _(event: TextEnded, run: _Run) -> list[BaseEvent]:
    return [TextMessageEndEvent(message_id=event.message_id)]


@_map.register
def _(event: ReasoningStarted, run: _Run) -> list[BaseEvent]:
    # One reasoning span per reasoning message: the span and the message share the id.
    return [ReasoningStartEvent(message_id=event.message_id), ReasoningMessageStartEvent(message_id=event.message_id)]


@_map.register
def _(event: ReasoningDelta, run: _Run) -> list[BaseEvent]:
    return [ReasoningMessageContentEvent(message_id=event.message_id, delta=event.text)]


@_map.register
def _(event: ReasoningEnded, run: _Run) -> list[BaseEvent]:
    return [ReasoningMessageEndEvent(message_id=event.message_id), ReasoningEndEvent(message_id=event.message_id)]


@_map.register
def _(event: ToolCallRequested, run: _Run) -> list[BaseEvent]:
    call_id = event.tool_call_id
    parent = event.parent_message_id
    start = ToolCallStartEvent(tool_call_id=call_id, tool_call_name=event.name, parent_message_id=parent)
    args = [ToolCallArgsEvent(tool_call_id=call_id, delta=event.arguments)] if event.arguments else []
    return [start, *args, ToolCallEndEvent(tool_call_id=call_id)]


@_map.register
def _(event: ToolResultReady, run: _Run) -> list[BaseEvent]:
    call_id = event.tool_call_id
    return [ToolCallResultEvent(message_id=event.message_id, tool_call_id=call_id, content=event.content, role="tool")]


@_map.register
def _(event: Notice, run: _Run) -> list[BaseEvent]:
    return [CustomEvent(name=event.name, value=event.value)]


@_map.register
def _(event: RunFinished, run: _Run) -> list[BaseEvent]:
    return [_finished(event, run.thread_id, run.run_id)]


@_map.register
def _(event: RunFailed, run: _Run) -> list[BaseEvent]:
    return [RunErrorEvent(code=event.code, message=event.message)]


def to_agui(event: RunEvent, *, thread_id: str, run_id: str) -> list[BaseEvent]:
    """The AG-UI events for one run event (one small handler per event type above)."""
    return _map(event, _Run(thread_id=thread_id, run_id=run_id))


def _terminal_json(event: RunFinished | RunFailed, *, thread_id: str = "", run_id: str = "") -> str:
    """The stored JSON of a terminal event, as the run's log writes it (`RunEventLog.append`)."""
    (terminal,) = to_agui(event, thread_id=thread_id, run_id=run_id)
    return terminal.model_dump_json(by_alias=True)


def log_endings() -> LogEndings:
    """The terminal events the lease sweep and the log repair store for runs whose process died (`RunStore`),
    with the slots their statements fill per run."""
    return LogEndings(
        lost=_terminal_json(
            RunFailed(code="run_lost", message=f"the run was lost: its server stopped (error_id {ERROR_ID_SLOT})")
        ),
        failed=_terminal_json(RunFailed(code=ERROR_CODE_SLOT, message=f"the run failed (error_id {ERROR_ID_SLOT})")),
        finished=_terminal_json(RunFinished(), thread_id=THREAD_ID_SLOT, run_id=RUN_ID_SLOT),
    )


class AguiStream:
    """A run's AG-UI event stream: run events in (`emit`), AG-UI events out through `publish` into the run's
    event log (`event_log.py`: numbered, stored, followed from any replica), read back with `stream()`."""

    def __init__(self, *, thread_id: str, run_id: str, log: RunEventLog) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.log = log

    def emit(self, event: RunEvent) -> None:
        for agui_event in to_agui(event, thread_id=self.thread_id, run_id=self.run_id):
            self.publish(agui_event)

    def publish(self, event: BaseEvent) -> None:
        """Every AG-UI event of the run leaves through here, in order."""
        self.log.append(event)

    def stream(self) -> AsyncIterator[LoggedEvent]:
        """The run's events from the first, as they come, to the terminal one."""
        return self.log.follow(0)
