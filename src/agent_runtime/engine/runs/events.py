"""AG-UI events of one run, built with the official `ag-ui-protocol` models, into that run's own event log.

Every run has its own emitter and log (`event_log.py`: sequence numbers, followers, durable writes), so
events of concurrent runs cannot mix. The emitter keeps the stream valid by construction: RUN_STARTED
first, content only inside an open message, open messages and steps closed before the terminal event, and
nothing after RUN_FINISHED or RUN_ERROR.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
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

from agent_runtime.engine.runs.event_log import LoggedEvent, RunEventLog


class RunEvents:
    def __init__(self, *, thread_id: str, run_id: str, log: RunEventLog) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.log = log
        self._open_steps: list[str] = []
        self._open_message: str | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _put(self, event: BaseEvent) -> None:
        if not self._closed:
            self.log.append(event)

    def run_started(self) -> None:
        self._put(RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id))

    def step_started(self, name: str) -> None:
        self._open_steps.append(name)
        self._put(StepStartedEvent(step_name=name))

    def step_finished(self, name: str) -> None:
        if name in self._open_steps:
            self._open_steps.remove(name)
            self._put(StepFinishedEvent(step_name=name))

    def text_start(self, message_id: str) -> None:
        if self._open_message != message_id:
            self.text_end()
            self._open_message = message_id
            self._put(TextMessageStartEvent(message_id=message_id, role="assistant"))

    def text_content(self, message_id: str, delta: str) -> None:
        if delta:
            self.text_start(message_id)
            self._put(TextMessageContentEvent(message_id=message_id, delta=delta))

    def text_end(self) -> None:
        if self._open_message is not None:
            self._put(TextMessageEndEvent(message_id=self._open_message))
            self._open_message = None

    def tool_call(self, *, tool_call_id: str, name: str, arguments: str, parent_message_id: str | None) -> None:
        self.text_end()
        self._put(
            ToolCallStartEvent(tool_call_id=tool_call_id, tool_call_name=name, parent_message_id=parent_message_id)
        )
        if arguments:
            self._put(ToolCallArgsEvent(tool_call_id=tool_call_id, delta=arguments))
        self._put(ToolCallEndEvent(tool_call_id=tool_call_id))

    def tool_result(self, *, message_id: str, tool_call_id: str, content: str) -> None:
        self._put(ToolCallResultEvent(message_id=message_id, tool_call_id=tool_call_id, content=content, role="tool"))

    def custom(self, name: str, value: Any) -> None:
        self._put(CustomEvent(name=name, value=value))

    def _close_open(self) -> None:
        self.text_end()
        for step in reversed(self._open_steps):
            self._put(StepFinishedEvent(step_name=step))
        self._open_steps.clear()

    def run_finished(self, usage: list[TokenUsage], *, cancelled: bool = False) -> None:
        self._close_open()
        outcome = RunFinishedCancelledOutcome() if cancelled else None
        self._put(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, usage=usage or None, outcome=outcome))
        self._finish()

    def run_error(self, *, code: str, message: str) -> None:
        self._close_open()
        self._put(RunErrorEvent(code=code, message=message))
        self._finish()

    def _finish(self) -> None:
        self._closed = True

    def stream(self) -> AsyncIterator[LoggedEvent]:
        """The run's events from the first, as they come, to the terminal one."""
        return self.log.follow(0)
