"""The one place run events become AG-UI events (official `ag-ui-protocol` models), and their one exit.

`to_agui` maps one protocol-neutral run event (`events/types.py`) to the AG-UI events that say it, and
`log_endings` writes the ends the lease sweep stores for runs whose process died; `AguiStream.publish` is the
single function every AG-UI event of a run leaves through (a durable per-run event log attaches there), and
`stream()` hands them to the HTTP response in order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import assert_never

from ag_ui.core import (
    PROTOCOL_VERSION,
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

from agent_runtime.engine.conversation.convert import to_agui as message_to_agui
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
from agent_runtime.engine.runs.ledger.repository import (
    ERROR_CODE_SLOT,
    ERROR_ID_SLOT,
    RUN_ID_SLOT,
    THREAD_ID_SLOT,
    LogEndings,
)
from agent_runtime.engine.runs.request.approval import approval_response_schema

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
        # What a resume may carry (request/approval.py validates exactly this).
        response_schema=approval_response_schema(pending.arguments_schema),
        metadata={"toolName": pending.tool_name, "arguments": _arguments(pending.arguments)},
    )


def _legacy_finished(event: RunFinished, thread_id: str, run_id: str) -> RunFinishedEvent | None:
    """RUN_FINISHED for a client that declared no protocol version (before 1.0: CopilotKit 1.74 bundles
    @ag-ui/core 0.0.59, whose strict outcome schemas know only `{"type": "success"}` and the interrupt outcome
    and reject the whole event otherwise). The outcome is left out (absent = success; a consumer derives the
    pending calls from the stream, TOOL_CALL_END without a result), and what it would say is in `result`,
    which every version accepts; None: the 1.0 event is valid there as it is."""
    if event.interrupts or not (event.cancelled or event.pending_tool_call_ids):
        return None
    result: dict[str, JsonValue] = (
        {"cancelled": True} if event.cancelled else {"pendingToolCallIds": list(event.pending_tool_call_ids)}
    )
    usage = [_usage(u) for u in event.usage] or None
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, result=result, usage=usage)


def _finished(event: RunFinished, thread_id: str, run_id: str, *, legacy: bool = False) -> RunFinishedEvent:
    legacy_event = _legacy_finished(event, thread_id, run_id) if legacy else None
    if legacy_event is not None:
        return legacy_event
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


def _lifecycle(
    event: RunStarted | RunFinished | RunFailed, thread_id: str, run_id: str, *, legacy: bool = False
) -> BaseEvent:
    match event:
        case RunStarted():
            # AG-UI 1.0 (basic/versioning): the producer declares its version on the event that opens a run.
            return RunStartedEvent(thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION)
        case RunFinished():
            return _finished(event, thread_id, run_id, legacy=legacy)
        case RunFailed():
            return RunErrorEvent(code=event.code, message=event.message)
        case _:
            assert_never(event)


def _state(event: MessagesSnapshot | StateSnapshot | StateDelta, thread_id: str) -> BaseEvent:
    match event:
        case MessagesSnapshot():
            return MessagesSnapshotEvent(messages=[message_to_agui(m, session_id=thread_id) for m in event.messages])
        case StateSnapshot():
            return StateSnapshotEvent(snapshot=event.state)
        case StateDelta():
            return StateDeltaEvent(delta=[o.model_dump() for o in event.operations])
        case _:
            assert_never(event)


def _text(event: TextStarted | TextDelta | TextEnded) -> BaseEvent:
    match event:
        case TextStarted():
            return TextMessageStartEvent(message_id=event.message_id, role="assistant")
        case TextDelta():
            return TextMessageContentEvent(message_id=event.message_id, delta=event.text)
        case TextEnded():
            return TextMessageEndEvent(message_id=event.message_id)
        case _:
            assert_never(event)


def _reasoning(event: ReasoningStarted | ReasoningDelta | ReasoningEnded) -> list[BaseEvent]:
    # One reasoning span per reasoning message: the span and the message share the id.
    match event:
        case ReasoningStarted():
            return [
                ReasoningStartEvent(message_id=event.message_id),
                ReasoningMessageStartEvent(message_id=event.message_id),
            ]
        case ReasoningDelta():
            return [ReasoningMessageContentEvent(message_id=event.message_id, delta=event.text)]
        case ReasoningEnded():
            return [
                ReasoningMessageEndEvent(message_id=event.message_id),
                ReasoningEndEvent(message_id=event.message_id),
            ]
        case _:
            assert_never(event)


def _tool_call(event: ToolCallRequested) -> list[BaseEvent]:
    call_id = event.tool_call_id
    parent = event.parent_message_id
    start = ToolCallStartEvent(tool_call_id=call_id, tool_call_name=event.name, parent_message_id=parent)
    args = [ToolCallArgsEvent(tool_call_id=call_id, delta=event.arguments)] if event.arguments else []
    return [start, *args, ToolCallEndEvent(tool_call_id=call_id)]


def to_agui(event: RunEvent, *, thread_id: str, run_id: str, legacy: bool = False) -> list[BaseEvent]:
    """The AG-UI events for one run event. `match` over the whole `RunEvent` union, each family in a small
    function of its own, ending in `assert_never`: an event type without a case fails mypy, not a run.
    `legacy`: the client declared no protocol version (see `_legacy_finished`)."""
    match event:
        case RunStarted() | RunFinished() | RunFailed():
            return [_lifecycle(event, thread_id, run_id, legacy=legacy)]
        case MessagesSnapshot() | StateSnapshot() | StateDelta():
            return [_state(event, thread_id)]
        case StageStarted():
            return [StepStartedEvent(step_name=event.stage)]
        case StageFinished():
            return [StepFinishedEvent(step_name=event.stage)]
        case TextStarted() | TextDelta() | TextEnded():
            return [_text(event)]
        case ReasoningStarted() | ReasoningDelta() | ReasoningEnded():
            return _reasoning(event)
        case ToolCallRequested():
            return _tool_call(event)
        case ToolResultReady():
            return [
                ToolCallResultEvent(
                    message_id=event.message_id, tool_call_id=event.tool_call_id, content=event.content, role="tool"
                )
            ]
        case Notice():
            return [CustomEvent(name=event.name, value=event.value)]
        case _:
            assert_never(event)


def _terminal_json(event: RunFinished | RunFailed, *, thread_id: str = "", run_id: str = "") -> str:
    """The stored JSON of a terminal event, as the run's log writes it (`RunEventLog.append`)."""
    return _lifecycle(event, thread_id, run_id).model_dump_json(by_alias=True)


# The code of the RUN_ERROR a taken-over run's log continues after (AguiStream.handed_over).
TAKEN_OVER = "run_taken_over"


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
    event log (`events/log.py`: numbered, stored, followed from any replica), read back with `stream()`."""

    def __init__(self, *, thread_id: str, run_id: str, log: RunEventLog, legacy: bool = False) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.log = log
        self.legacy = legacy

    def emit(self, event: RunEvent) -> None:
        for agui_event in to_agui(event, thread_id=self.thread_id, run_id=self.run_id, legacy=self.legacy):
            self.publish(agui_event)

    def publish(self, event: BaseEvent) -> None:
        """Every AG-UI event of the run leaves through here, in order."""
        self.log.append(event)

    def handed_over(self, takeover: int) -> None:
        """A taken-over run's first events (engine/runs/takeover/): whatever the dead process streamed ends here, the
        way AG-UI allows it (a RUN_ERROR ends every open message, step and tool call, and a RUN_STARTED may follow
        one), and the run starts again on the stream under the same run id. The RUN_ERROR does not end the log."""
        message = (
            f"the server running this run stopped; another goes on from its last stored step (takeover {takeover})"
        )
        failed = RunFailed(code=TAKEN_OVER, message=message)
        for agui_event in to_agui(failed, thread_id=self.thread_id, run_id=self.run_id, legacy=self.legacy):
            self.log.append(agui_event, ends=False)

    def stream(self) -> AsyncIterator[LoggedEvent]:
        """The run's events from the first, as they come, to the terminal one."""
        return self.log.follow(0)
