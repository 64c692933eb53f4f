"""A CrewAI LLM that hands every model call to our own async LLM layer (`engine/llm`).

Given a model string, CrewAI would call the provider through its own SDK clients, bypassing LiteLLM, our usage and
cost capture, our retries and the demo model. `DelegatingLLM` is a `BaseLLM` subclass (CrewAI's documented extension
point) whose `call`/`acall` translate CrewAI's calling convention into `ModelCall` -> `ModelReply`, answered by the
run's `call_model`. One per stage per run (cheap: no SDK client), so everything it does belongs to that run.

- CrewAI's executor calls the sync `call` from worker threads: it hands the coroutine to the app's loop and waits
  (CrewAI offers no async API there). `close()` cancels the call in flight and refuses later ones.
- Every final answer is validated against the stage's contract; a bad one gets a repair turn, asked without tools,
  at most `max_json_retries` times, then `StageOutputError`.
- The reasoning of a reply with tool calls goes back on that tool-call turn in the stage's later calls (CrewAI
  rebuilds the turn without it; DeepSeek answers 400 without it).
- Tool calls are registered with the run's `RunToolCalls` (tool_results.py), which hands their results to the run.
- CrewAI's own rate-limit retry is opted out of: our LLM layer retries.

What CrewAI passes and expects, as read in its source: docs/crewai-notes.md; the private reaches: PATCHES.md.
This module does not import CrewAI: `DelegatingLLM` is created on first access, after `env.load_crewai()`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from agent_runtime.engine.flow.crewai.env import require_crewai_env
from agent_runtime.engine.flow.crewai.threads import waiting_for_the_loop
from agent_runtime.engine.flow.crewai.tool_results import RunToolCalls
from agent_runtime.engine.flow.crewai.wire import (
    arguments_crewai_cannot_take,
    refused_tool_calls,
    repair_instruction,
    wire_messages,
    wire_tools,
    with_schema_instruction,
    without_request_end,
)
from agent_runtime.engine.flow.model_call import (
    CallModel,
    EventSink,
    ModelCall,
    ModelReply,
    StageCancelledError,
    StageOutputError,
)
from agent_runtime.engine.llm.repair import strip_code_fence, unusable_answer

if TYPE_CHECKING:
    from crewai.agents.agent_builder.base_agent import BaseAgent
    from crewai.llms.base_llm import BaseLLM
    from crewai.task import Task
    from crewai.tools.base_tool import BaseTool
    from crewai.utilities.types import LLMMessage

# Big enough that CrewAI never defers a tool result to a temp file nor summarises on its own: the
# memory window (engine/memory) owns the context budget.
_CONTEXT_WINDOW_TOKENS = 128_000

_F = TypeVar("_F", bound=Callable[..., Any])


def _without_crewai_retry(method: _F) -> _F:
    # BaseLLM.__init_subclass__ skips methods carrying this marker (crewai/llms/base_llm.py).
    method._crewai_rate_limit_wrapped = True  # type: ignore[attr-defined]
    return method


class _DelegatingLLMBody(BaseModel):
    """Everything of `DelegatingLLM` but its CrewAI base class (see "Importing" in the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm_type: str = "delegating"
    stage: str
    output_model: type[BaseModel] | None = None
    max_json_retries: int = Field(default=2, ge=0)
    inject_schema: bool = True
    # Sent with every call as ModelCall.max_tokens. Not BaseLLM's `max_tokens`: that one is CrewAI's own
    # (read by its provider clients, which this LLM replaces).
    max_output_tokens: int | None = Field(default=None, ge=1)

    _call_model: CallModel | None = PrivateAttr(default=None)
    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)
    _tool_calls: RunToolCalls | None = PrivateAttr(default=None)
    # Tool call id -> the reasoning of the reply that made it (thinking mode), put back in the stage's later calls.
    _reasoning_by_call: dict[str, str] = PrivateAttr(default_factory=dict)
    # The messages of the call that gave the stage's accepted answer, and that answer: where the next stage starts.
    _transcript: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _inflight: set[concurrent.futures.Future[Any]] = PrivateAttr(default_factory=set)
    _closed: bool = PrivateAttr(default=False)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def for_stage(
        cls,
        call_model: CallModel,
        *,
        stage: str,
        model: str,
        output_model: type[BaseModel] | None = None,
        sink: EventSink | None = None,
        tool_calls: RunToolCalls | None = None,
        max_json_retries: int = 2,
        inject_schema: bool = True,
        max_output_tokens: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> Self:
        """Build the LLM for one stage of one run. Call it from the event loop (or pass `loop`). `tool_calls`: the
        run's (shared with its tools and other stages); without it the stage has its own, reporting to `sink`."""
        llm = cls(
            model=model,
            stage=stage,
            output_model=output_model,
            max_json_retries=max_json_retries,
            inject_schema=inject_schema,
            max_output_tokens=max_output_tokens,
        )
        llm._call_model = call_model
        llm._loop = loop or asyncio.get_running_loop()
        llm._tool_calls = tool_calls or RunToolCalls(sink, llm._loop)
        return llm

    # -- what CrewAI asks of a model -----------------------------------------------------------------

    def supports_function_calling(self) -> bool:
        return True

    def supports_stop_words(self) -> bool:
        # Native tool calling and JSON answers need no ReAct stop words ("\nObservation:").
        return False

    def get_context_window_size(self) -> int:
        return _CONTEXT_WINDOW_TOKENS

    def get_input_tokens_count(
        self,
        messages: str | list[LLMMessage],
        tools: list[dict[str, BaseTool]] | None = None,
        response_model: type[BaseModel] | None = None,
    ) -> int:
        # Same 4-chars-per-token estimate as BaseLLM, without its warning on every call.
        text = messages if isinstance(messages, str) else "".join(str(m.get("content") or "") for m in messages)
        return (len(text) + 3) // 4

    @_without_crewai_retry
    def call(
        self,
        messages: str | list[LLMMessage],
        tools: list[dict[str, BaseTool]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Task | None = None,
        from_agent: BaseAgent | None = None,
        response_model: type[BaseModel] | None = None,
    ) -> str | Any:
        """Sync entry point, called by CrewAI's executor from a worker thread."""
        _refuse_available_functions(available_functions)
        if _running_loop() is self._require_loop():
            raise RuntimeError(
                "DelegatingLLM.call() on the event-loop thread would deadlock; CrewAI should use acall()"
            )
        # The library offers no async API on this path (see the module docstring), so the worker thread
        # hands the coroutine to the loop that owns our LLM layer and waits for it.
        future = self._submit(messages, tools, response_model)
        try:
            with waiting_for_the_loop():
                return future.result()
        except concurrent.futures.CancelledError as exc:
            raise StageCancelledError(f"stage {self.stage!r}: the model call was cancelled") from exc
        finally:
            self._forget(future)

    @_without_crewai_retry
    async def acall(
        self,
        messages: str | list[LLMMessage],
        tools: list[dict[str, BaseTool]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Task | None = None,
        from_agent: BaseAgent | None = None,
        response_model: type[BaseModel] | None = None,
    ) -> str | Any:
        _refuse_available_functions(available_functions)
        # Also from a loop that is not ours (the flow may run on a private loop): the call still runs on ours.
        future = self._submit(messages, tools, response_model)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError as exc:
            if not self._closed:
                raise  # our caller was cancelled (which cancelled the model call too)
            raise StageCancelledError(f"stage {self.stage!r}: the model call was cancelled") from exc
        finally:
            self._forget(future)

    def _submit(
        self,
        messages: str | list[LLMMessage],
        tools: list[dict[str, BaseTool]] | None,
        response_model: type[BaseModel] | None,
    ) -> concurrent.futures.Future[Any]:
        # Created and registered under the lock, so close() either sees the future or refuses the call.
        with self._lock:
            if self._closed:
                raise StageCancelledError(f"stage {self.stage!r}: the run was closed")
            coroutine = self._complete(messages, tools, response_model)
            future = asyncio.run_coroutine_threadsafe(coroutine, self._require_loop())
            self._inflight.add(future)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._inflight.discard(future)

    # -- run control and observation -----------------------------------------------------------------

    def close(self) -> None:
        """Cancel in-flight model calls and refuse new ones (idempotent, any thread)."""
        with self._lock:
            self._closed = True
            inflight = list(self._inflight)
        for future in inflight:
            future.cancel()

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The messages of the call whose answer the stage accepted (repair turns left out), then that answer as the
        model wrote it: the next stage of the turn starts with exactly these, so the provider's cache holds all of
        it (engine/flow/prompt.py). Empty until the stage has an accepted answer."""
        return list(self._transcript)

    @property
    def tool_calls(self) -> RunToolCalls:
        if self._tool_calls is None:
            raise RuntimeError("DelegatingLLM was built without its tool calls; use DelegatingLLM.for_stage()")
        return self._tool_calls

    # -- the one code path ---------------------------------------------------------------------------

    async def _complete(
        self,
        messages: str | list[LLMMessage],
        tools: list[dict[str, BaseTool]] | None,
        response_model: type[BaseModel] | None,
    ) -> str | BaseModel | list[dict[str, Any]]:
        call_model = self._call_model
        if call_model is None:
            raise RuntimeError("DelegatingLLM was built without call_model; use DelegatingLLM.for_stage()")
        wire = without_request_end(wire_messages(messages, self._reasoning_by_call))
        self.tool_calls.observe(wire)
        contract = response_model or self.output_model
        if contract is not None and self.inject_schema:
            wire = with_schema_instruction(wire, contract)
        offered_tools = wire_tools(tools)

        conversation = wire
        attempt = 0
        while True:
            request = ModelCall(
                messages=conversation,
                tools=offered_tools,
                json_mode=contract is not None,
                stage=self.stage,
                attempt=attempt,
                max_tokens=self.max_output_tokens,
                # A repair asks for the answer alone. Offered the tools again, a model that answered in prose
                # after a tool result calls the same tool again, and CrewAI ends the stage on the 5th identical
                # call (MAX_REPEATED_TOOL_CALLS) instead of letting it answer.
                allow_tools=attempt == 0,
            )
            reply = await call_model(request)
            if reply.tool_calls and offered_tools and request.allow_tools:
                return self._hand_over_tool_calls(reply)
            content = reply.content or ""
            if contract is None:
                self._transcript = [*wire, {"role": "assistant", "content": content}]
                return content
            if reply.tool_calls:
                # No tools offered, or none allowed in a repair: nothing would run these calls.
                problem = refused_tool_calls(reply.tool_calls)
            else:
                try:
                    parsed = contract.model_validate_json(strip_code_fence(content))
                except ValidationError as exc:
                    problem = unusable_answer(content, reply.finish_reason, exc)
                else:
                    self._transcript = [*wire, {"role": "assistant", "content": content}]
                    # CrewAI wants the instance when it asked for a model; a tool stage's final answer goes back
                    # as text and CrewAI validates it again into the kickoff's response_format (cheap, always valid).
                    return parsed if response_model is not None else parsed.model_dump_json()
            if attempt >= self.max_json_retries:
                raise StageOutputError(
                    f"stage {self.stage!r}: the model's answer did not match {contract.__name__} "
                    f"after {attempt + 1} attempts",
                    extra={"stage": self.stage, "attempts": attempt + 1},
                )
            attempt += 1
            conversation = [
                *conversation,
                # The answer's text only: refused tool calls would need results, and the reasoning of an answer
                # without tool calls is never sent back.
                {"role": "assistant", "content": content},
                {
                    "role": "user",
                    "content": repair_instruction(problem, contract, schema_in_request=self.inject_schema),
                },
            ]

    def _hand_over_tool_calls(self, reply: ModelReply) -> list[dict[str, Any]]:
        for tool_call in reply.tool_calls:
            if arguments_crewai_cannot_take(tool_call.arguments):
                raise StageOutputError(
                    f"stage {self.stage!r}: the model called {tool_call.name} with arguments that are not "
                    "a JSON object",
                    extra={"stage": self.stage},
                )
        self.tool_calls.issue(self.stage, reply.tool_calls)
        for tool_call in reply.tool_calls:
            if reply.reasoning is not None:
                self._reasoning_by_call[tool_call.id] = reply.reasoning
        return [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
        ]

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("DelegatingLLM was built without an event loop; use DelegatingLLM.for_stage()")
        return self._loop


if TYPE_CHECKING:

    class DelegatingLLM(_DelegatingLLMBody, BaseLLM):
        """One stage of one run; see the module docstring. Build it with `for_stage` on the event loop."""

else:

    def __getattr__(name: str) -> Any:
        if name == "DelegatingLLM":
            return delegating_llm_class()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def delegating_llm_class() -> type[DelegatingLLM]:
    """The `BaseLLM` subclass, defined on first use, once CrewAI's offline environment is configured."""
    require_crewai_env()
    from crewai.llms.base_llm import BaseLLM as CrewAIBaseLLM

    class _DelegatingLLM(_DelegatingLLMBody, CrewAIBaseLLM):
        """One stage of one run; see the module docstring. Build it with `for_stage` on the event loop."""

    _DelegatingLLM.__name__ = _DelegatingLLM.__qualname__ = "DelegatingLLM"
    globals()["DelegatingLLM"] = _DelegatingLLM
    return cast("type[DelegatingLLM]", _DelegatingLLM)


def _refuse_available_functions(available_functions: dict[str, Any] | None) -> None:
    if available_functions:
        raise NotImplementedError(
            "DelegatingLLM returns tool calls to CrewAI's executor; LLM-side tool execution "
            "(available_functions, used by CrewAI planning/reasoning) is not supported: disable planning"
        )


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
