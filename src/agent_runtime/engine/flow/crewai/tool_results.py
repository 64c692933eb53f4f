"""The tool calls a run's model made, and their results handed to the run in the order the model made them.

Our tools hand their `ToolOutcome` over the moment they finish (`RuntimeToolAdapter`). CrewAI answers some calls
without running our tool (its tool cache, a usage limit, arguments its schema refuses): those results are taken
from the tool turns CrewAI puts in the stage's next model call or its final transcript (`observe`). CrewAI gives a
tool no call id, so a hand-over is matched to the first open call of that tool whose arguments, validated as
CrewAI validates them, are the ones the tool got. Results are released in the model's order, so the stored thread
reads as the conversation the model saw (CrewAI sends parallel calls' results in that order too). Importing this
module does not import CrewAI.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.model_call import EventSink, StageToolResult
from agent_runtime.engine.flow.tools import ToolOutcome

# What CrewAI sends the model instead of a result when a call fails on its side, e.g. arguments its validation of
# the tool's schema refuses before our tool sees them.
CREWAI_TOOL_ERROR = "Error executing tool: "
_MAX_TOOL_ERROR_CHARS = 500

ArgumentsMatch = Callable[[str], bool]
"""Whether a tool call's JSON arguments are the ones a tool ran with."""


def crewai_result(content: str) -> StageToolResult:
    """A result CrewAI wrote: our tools' failures are {"error": "..."} (`ToolOutcome.failure`), and CrewAI's own error
    text is put in the same shape, so clients and the stored row can tell it failed."""
    if content.startswith(CREWAI_TOOL_ERROR):
        reason = content[len(CREWAI_TOOL_ERROR) :][:_MAX_TOOL_ERROR_CHARS]
        return _unplaced(json.dumps({"error": reason}, ensure_ascii=False), is_error=True)
    try:
        parsed = json.loads(content)
    except ValueError:
        return _unplaced(content, is_error=False)
    return _unplaced(content, is_error=isinstance(parsed, dict) and set(parsed) == {"error"})


def _unplaced(content: str, *, is_error: bool) -> StageToolResult:
    return StageToolResult(stage="", call_id="", name="", content=content, is_error=is_error)


class RunToolCalls:
    """One run's tool calls (any stage), their results, and the sink that gets each result once, in call order.

    Safe from any thread: the sink is always called on the loop the run was built on.
    """

    def __init__(self, sink: EventSink | None, loop: asyncio.AbstractEventLoop) -> None:
        self._sink = sink
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: dict[str, _Call] = {}
        self._order: list[str] = []
        self._released = 0

    def issue(self, stage: str, calls: Sequence[ToolCallSpec]) -> None:
        """The model made these calls (in this order); their results are awaited."""
        with self._lock:
            for call in calls:
                if call.id not in self._calls:
                    self._calls[call.id] = _Call(stage=stage, spec=call)
                    self._order.append(call.id)

    def hand_over(self, name: str, matches: ArgumentsMatch, outcome: ToolOutcome) -> None:
        """Our tool `name` finished with `outcome`, for the first open call whose arguments `matches` accepts."""
        with self._lock:
            open_calls = (c for c in self._calls.values() if c.result is None and c.spec.name == name)
            call = next((c for c in open_calls if matches(c.spec.arguments)), None)
            if call is None:  # not a call this run issued: CrewAI's tool turn will say what happened
                return
            call.result = _unplaced(outcome.content, is_error=not outcome.ok)
            ready = self._take_ready()
        self._deliver(ready)

    def observe(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Results in CrewAI's tool turns for calls no tool handed over (history turns are not this run's calls)."""
        with self._lock:
            for message in messages:
                if message.get("role") != "tool":
                    continue
                call = self._calls.get(str(message.get("tool_call_id") or ""))
                if call is None or call.result is not None:
                    continue
                content = message.get("content")
                call.result = crewai_result(content if isinstance(content, str) else json.dumps(content))
            ready = self._take_ready()
        self._deliver(ready)

    def stage_ended(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """`observe` the stage's final transcript; calls CrewAI never answered (a `result_as_answer` tool ends the
        loop before the rest of its batch) no longer hold back the results after them."""
        self.observe(messages)
        with self._lock:
            ready = self._take_ready(skip_open=True)
        self._deliver(ready)

    def _take_ready(self, *, skip_open: bool = False) -> list[StageToolResult]:
        ready: list[StageToolResult] = []
        while self._released < len(self._order):
            call = self._calls[self._order[self._released]]
            if call.result is None:
                if not skip_open:
                    break
                self._released += 1
                continue
            ready.append(
                call.result.model_copy(update={"stage": call.stage, "call_id": call.spec.id, "name": call.spec.name})
            )
            self._released += 1
        return ready

    def _deliver(self, ready: list[StageToolResult]) -> None:
        if self._sink is None or not ready:
            return
        if _running_loop() is self._loop:
            for event in ready:
                self._sink(event)
        else:
            for event in ready:
                self._loop.call_soon_threadsafe(self._sink, event)


class _Call:
    __slots__ = ("result", "spec", "stage")

    def __init__(self, stage: str, spec: ToolCallSpec) -> None:
        self.stage = stage
        self.spec = spec
        self.result: StageToolResult | None = None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
