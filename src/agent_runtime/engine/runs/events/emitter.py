"""The events of one run, in an order that is valid by construction, handed to one sink.

Every run has its own emitter, so events of concurrent runs cannot mix. The emitter keeps the order
valid whatever its callers do: RUN_STARTED first, text and reasoning only inside an open message,
open messages and stages closed before the terminal event, and nothing after RUN_FINISHED or
RUN_ERROR. The sink (`AguiStream.emit` in production) turns them into AG-UI and into the run's event log.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import JsonValue

from agent_runtime.engine.conversation.chat_messages import ChatMessage
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

EventSink = Callable[[RunEvent], None]


class RunEvents:
    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._open_steps: list[str] = []
        self._open_message: str | None = None
        self._open_reasoning: str | None = None
        self._closed = False
        self.streamed_message_ids: list[str] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def _put(self, event: RunEvent) -> None:
        if not self._closed:
            self._sink(event)

    def run_started(self) -> None:
        self._put(RunStarted())

    def messages_snapshot(self, messages: list[ChatMessage]) -> None:
        self._close_content()
        self._put(MessagesSnapshot(messages=messages))

    def state_snapshot(self, state: dict[str, JsonValue]) -> None:
        self._put(StateSnapshot(state=state))

    def state_delta(self, operations: list[PatchOperation]) -> None:
        if operations:
            self._put(StateDelta(operations=operations))

    def step_started(self, name: str) -> None:
        self._open_steps.append(name)
        self._put(StageStarted(stage=name))

    def step_finished(self, name: str) -> None:
        if name in self._open_steps:
            self._open_steps.remove(name)
            self._put(StageFinished(stage=name))

    def text_start(self, message_id: str) -> None:
        if self._open_message != message_id:
            self._close_content()
            self._open_message = message_id
            self.streamed_message_ids.append(message_id)
            self._put(TextStarted(message_id=message_id))

    def text_content(self, message_id: str, delta: str) -> None:
        if delta:
            self.text_start(message_id)
            self._put(TextDelta(message_id=message_id, text=delta))

    def text_end(self) -> None:
        if self._open_message is not None:
            self._put(TextEnded(message_id=self._open_message))
            self._open_message = None

    def reasoning_content(self, message_id: str, delta: str) -> None:
        if not delta:
            return
        if self._open_reasoning != message_id:
            self._close_content()
            self._open_reasoning = message_id
            self._put(ReasoningStarted(message_id=message_id))
        self._put(ReasoningDelta(message_id=message_id, text=delta))

    def reasoning_end(self) -> None:
        if self._open_reasoning is not None:
            self._put(ReasoningEnded(message_id=self._open_reasoning))
            self._open_reasoning = None

    def tool_call(self, *, tool_call_id: str, name: str, arguments: str, parent_message_id: str | None) -> None:
        self._close_content()
        self._put(
            ToolCallRequested(
                tool_call_id=tool_call_id, name=name, arguments=arguments, parent_message_id=parent_message_id
            )
        )

    def tool_result(self, *, message_id: str, tool_call_id: str, content: str) -> None:
        self._close_content()
        self._put(ToolResultReady(message_id=message_id, tool_call_id=tool_call_id, content=content))

    def notice(self, name: str, value: dict[str, JsonValue]) -> None:
        self._put(Notice.model_validate({"name": name, "value": value}))

    def _close_content(self) -> None:
        self.text_end()
        self.reasoning_end()

    def _close_open(self) -> None:
        self._close_content()
        for step in reversed(self._open_steps):
            self._put(StageFinished(stage=step))
        self._open_steps.clear()

    def run_finished(
        self,
        usage: list[ModelUsage],
        *,
        pending_tool_call_ids: list[str] | None = None,
        interrupts: list[PendingInterrupt] | None = None,
        cancelled: bool = False,
    ) -> None:
        self._close_open()
        self._put(
            RunFinished(
                usage=usage,
                pending_tool_call_ids=pending_tool_call_ids or [],
                interrupts=interrupts or [],
                cancelled=cancelled,
            )
        )
        self._closed = True

    def run_error(self, *, code: str, message: str) -> None:
        self._close_open()
        self._put(RunFailed(code=code, message=message))
        self._closed = True
