"""Our async tools as CrewAI tools (`RuntimeToolAdapter`), and a run's tools in flight (`ToolCalls`).

Tools: our `Tool`s are async and bound to the user's context (`RunToolSet`). CrewAI runs a tool with
`BaseTool.run` on an executor worker thread, and turns a coroutine result into `asyncio.run(...)`: a new
event loop per call, which breaks anything bound to the app's loop (database pool, HTTP sessions).
`RuntimeToolAdapter._run` therefore hands the coroutine to the app's loop, like `DelegatingLLM.call`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from typing import Any

from pydantic import ConfigDict, PrivateAttr

from agent_runtime.engine.flow.crewai.env import require_crewai_env
from agent_runtime.engine.flow.crewai.threads import waiting_for_the_loop
from agent_runtime.engine.flow.crewai.tool_results import RunToolCalls
from agent_runtime.engine.flow.model_call import StageCancelledError
from agent_runtime.engine.flow.tools import RunToolSet, Tool, ToolOutcome

require_crewai_env()

from crewai.tools import BaseTool  # noqa: E402

logger = logging.getLogger(__name__)


class ToolCalls:
    """A run's tools in flight (futures on the app's loop), so that stopping the run abandons them at their
    next await instead of letting them finish (CrewAI's thread waiting for one cannot be interrupted)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future[ToolOutcome]] = set()
        self._closed = False

    def add(self, future: concurrent.futures.Future[ToolOutcome]) -> None:
        with self._lock:
            self._futures.add(future)
            closed = self._closed
        if closed:
            future.cancel()

    def discard(self, future: concurrent.futures.Future[ToolOutcome]) -> None:
        with self._lock:
            self._futures.discard(future)

    def cancel_all(self) -> None:
        with self._lock:
            self._closed = True
            futures = list(self._futures)
        for future in futures:
            future.cancel()


class RuntimeToolAdapter(BaseTool):
    """One of our async tools as a CrewAI tool, run on the app's event loop."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _toolset: RunToolSet | None = PrivateAttr(default=None)
    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)
    _calls: ToolCalls | None = PrivateAttr(default=None)
    _results: RunToolCalls | None = PrivateAttr(default=None)
    _requires_approval: bool = PrivateAttr(default=False)

    @classmethod
    def wrap(
        cls,
        tool: Tool[Any],
        toolset: RunToolSet,
        loop: asyncio.AbstractEventLoop,
        calls: ToolCalls,
        results: RunToolCalls,
        *,
        requires_approval: bool = False,
    ) -> RuntimeToolAdapter:
        adapter = cls(name=tool.name, description=tool.description, args_schema=tool.args_model)
        adapter._toolset = toolset
        adapter._loop = loop
        adapter._calls = calls
        adapter._results = results
        adapter._requires_approval = requires_approval
        return adapter

    def _run(self, **kwargs: Any) -> str:
        # Called on an executor worker thread; CrewAI has no async tool path there (it would asyncio.run()).
        future = self._submit(kwargs)
        try:
            with waiting_for_the_loop():
                return future.result().content
        except concurrent.futures.CancelledError as exc:
            raise StageCancelledError(f"tool {self.name!r}: the run was stopped") from exc
        finally:
            self._require_calls().discard(future)

    async def _arun(self, **kwargs: Any) -> str:
        # Possibly on the flow's private loop: the tool still runs on the app's.
        future = self._submit(kwargs)
        try:
            return (await asyncio.wrap_future(future)).content
        finally:
            self._require_calls().discard(future)

    def _submit(self, kwargs: dict[str, Any]) -> concurrent.futures.Future[ToolOutcome]:
        future = asyncio.run_coroutine_threadsafe(self._outcome(kwargs), self._require_loop())
        self._require_calls().add(future)
        return future

    def _require_calls(self) -> ToolCalls:
        if self._calls is None:
            raise RuntimeError(
                "RuntimeToolAdapter was built without its run's tool calls; use RuntimeToolAdapter.wrap()"
            )
        return self._calls

    async def _outcome(self, kwargs: dict[str, Any]) -> ToolOutcome:
        if self._toolset is None:
            raise RuntimeError("RuntimeToolAdapter was built without a tool set; use RuntimeToolAdapter.wrap()")
        if self._requires_approval:
            # The run stops before CrewAI gets such a call (RunGateway); reaching here would be a bug.
            logger.error("tool %s reached CrewAI without the user's approval", self.name)
            return ToolOutcome.failure(f"{self.name} runs only after the user approves it")
        try:
            outcome = await self._toolset.run(self.name, json.dumps(kwargs, ensure_ascii=False))
        except Exception:
            # Tools catch their own failures; this is a bug around them. Raised, CrewAI would hand the
            # exception's text to the model and to the client as the tool's result.
            logger.exception("tool adapter failed: tool=%s", self.name)
            outcome = ToolOutcome.failure(f"{self.name} failed with an internal error")
        if self._results is not None:
            self._results.hand_over(self.name, lambda arguments: self._validated(arguments) == kwargs, outcome)
        return outcome

    def _validated(self, arguments: str) -> dict[str, Any] | None:
        # The kwargs CrewAI runs a tool with: the call's JSON validated by the tool's schema (BaseTool.run).
        try:
            return self._validate_kwargs(json.loads(arguments))
        except ValueError:
            return None

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("RuntimeToolAdapter was built without an event loop; use RuntimeToolAdapter.wrap()")
        return self._loop


__all__ = ["RuntimeToolAdapter", "ToolCalls"]
