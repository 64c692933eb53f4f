"""A stage's tools for one run: the schemas it offers the model, and a reply's tool calls run on the app's loop.

The calls of one reply run concurrently; each result is handed to the run (`EventSink`: TOOL_CALL_RESULT and the
stored row) as soon as it and every call before it have finished, so the stored thread reads in the order the model
called. A cancelled run cuts its running tools (their coroutines are cancelled) unless a tool's definition says it
may not be cut (`Tool.cancellable`): that one finishes first, bounded by its own timeout. Either way every call of
the reply gets a result, a cut one `ToolOutcome.cancelled_call()`, before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.model_call import EventSink, StageToolResult
from agent_runtime.engine.flow.tools import RunToolSet, ToolOutcome
from agent_runtime.engine.flow.wire import WireTurn, tool_turn
from agent_runtime.engine.llm.models import ToolSchema

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class ToolBatch:
    """A reply's calls answered: the tool turns the model gets next, and each call's result text, in call order."""

    turns: list[WireTurn]
    contents: list[str]


@dataclass
class _Results:
    stage: str
    calls: Sequence[ToolCallSpec]
    sink: EventSink | None
    outcomes: list[ToolOutcome | None] = field(init=False)
    released: int = 0

    def __post_init__(self) -> None:
        self.outcomes = [None] * len(self.calls)

    def done(self, index: int, outcome: ToolOutcome) -> None:
        self.outcomes[index] = outcome
        while self.released < len(self.calls) and (ready := self.outcomes[self.released]) is not None:
            call = self.calls[self.released]
            self.released += 1
            if self.sink is not None:
                self.sink(
                    StageToolResult(
                        stage=self.stage,
                        call_id=call.id,
                        name=call.name,
                        content=ready.content,
                        is_error=not ready.ok,
                        cancelled=ready.cancelled,
                    )
                )

    def cut(self) -> None:
        for index, outcome in enumerate(self.outcomes):
            if outcome is None:
                self.done(index, ToolOutcome.cancelled_call())


class StageTools:
    """`refused`: tools the stage never runs on the model's word (approval tools): the run stops at such a call
    before the stage sees it (the gateway raises `ToolCallsPending`), so reaching one here is a bug, answered as a
    failed call."""

    def __init__(self, toolset: RunToolSet, *, sink: EventSink | None, refused: Collection[str] = ()) -> None:
        self._toolset = toolset
        self._sink = sink
        self._refused = frozenset(refused)
        self.schemas: list[ToolSchema] = toolset.schemas()

    async def run(self, stage: str, calls: Sequence[ToolCallSpec]) -> ToolBatch:
        results = _Results(stage, calls, self._sink)
        try:
            if len(calls) == 1:
                await self._one(results, 0)
            else:
                await self._all(results)
        except asyncio.CancelledError:
            results.cut()
            raise
        contents = [outcome.content for outcome in results.outcomes if outcome is not None]
        return ToolBatch(turns=[tool_turn(c, text) for c, text in zip(calls, contents, strict=True)], contents=contents)

    async def _all(self, results: _Results) -> None:
        # Not asyncio.gather: cancelled, it returns at once, before a tool that may not be cut has finished.
        running = [asyncio.ensure_future(self._one(results, index)) for index in range(len(results.calls))]
        try:
            await asyncio.wait(running)
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            await _unless_cut(asyncio.wait(running))
            raise
        for task in running:
            task.result()

    async def _one(self, results: _Results, index: int) -> None:
        call = results.calls[index]
        if call.name in self._refused:
            logger.error("tool %s reached the stage without the user's approval", call.name)
            results.done(index, ToolOutcome.failure(f"{call.name} runs only after the user approves it"))
            return
        if self._toolset.cancellable(call.name):
            results.done(index, await self._outcome(call))
            return
        running = asyncio.ensure_future(self._outcome(call))
        try:
            results.done(index, await asyncio.shield(running))
        except asyncio.CancelledError:
            results.done(index, await _unless_cut(running))
            raise

    async def _outcome(self, call: ToolCallSpec) -> ToolOutcome:
        try:
            return await self._toolset.run(call.name, call.arguments, call_id=call.id)
        except Exception:
            # Tools catch their own failures: this is a bug around them, whose text neither the model nor the client
            # may see.
            logger.exception("tool call failed: tool=%s", call.name)
            return ToolOutcome.failure(f"{call.name} failed with an internal error")


async def _unless_cut(awaitable: Awaitable[_T]) -> _T:
    """`awaitable`'s result, however often the caller is cancelled meanwhile (a run can be stopped twice: a cancel,
    then the shutdown): a tool that may not be cut finishes, bounded by its own timeout."""
    future = asyncio.ensure_future(awaitable)
    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise
