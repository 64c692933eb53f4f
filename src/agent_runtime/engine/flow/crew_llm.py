"""A CrewAI LLM that hands every model call to our own async LLM layer (`engine/llm`).

Why: given a model string, CrewAI calls DeepSeek/OpenAI through its own native SDK clients and so
bypasses LiteLLM, our usage/cost capture, our retries and the offline demo model. `DelegatingLLM` is a
`BaseLLM` subclass (the extension point CrewAI documents for custom models) whose `call`/`acall` only
translate between CrewAI's calling convention and two small models, `ModelCall` -> `ModelReply`,
answered by an `async def call_model(request: ModelCall) -> ModelReply` the caller provides.

What CrewAI passes and expects back (read in crewai 1.15.30, pinned by tests/flow/test_crew_*.py, details
in docs/crewai-notes.md): OpenAI-style `messages`; with native tools, `tools=[...]` and the model's tool
calls expected back as an OpenAI-shaped list (CrewAI runs the tools and calls again with tool turns);
with `response_model`, the parsed model (never sent as a `json_schema` response format, which DeepSeek
rejects: `ModelCall` only has `json_mode`); `available_functions` (planning helpers) is refused. The
executor calls only the sync `call`, from worker threads; `acall` serves CrewAI's `Converter`. Our LLM
layer lives on the app's event loop, so `call` hands the coroutine to it with
`asyncio.run_coroutine_threadsafe` and waits: CrewAI offers no async API on that path.

Structured output: a stage declares its contract (`output_model`). Every final answer of the stage (no
tool calls) is validated here against it, including the contract's own validators; a bad answer gets a
repair turn (the bad answer + what was wrong) and is asked again, at most `max_json_retries` times, then
`StageOutputError`. Doing it here keeps it bounded and visible: CrewAI's own fallback for a tool stage's
bad final answer is a `Converter` call whose failure is swallowed (the output's `pydantic` is `None`).

Retries: `BaseLLM.__init_subclass__` wraps a subclass's own `call`/`acall` in CrewAI's rate-limit retry
(3 attempts, 1-8 s `time.sleep` on a worker thread). Our LLM layer already retries, so the methods live on
a base class and carry CrewAI's "already wrapped" marker: one failure policy, in one place.

Per-run correlation: one `DelegatingLLM` per stage per run (`for_stage`: ~0.03 ms, no SDK client, no SSL
context; CrewAI's own `LLM()` costs ~43 ms per LIBRARY-NOTES). Its `call_model` closure is bound to the
run and `ModelCall.stage` names the stage, so usage rows, audit rows and token streaming belong to the
run with no contextvar and no use of CrewAI's process-wide event bus. Token streaming therefore happens inside
`call_model` (it may stream from the provider and push `assistant_text` deltas to the run's events while
still returning the whole `ModelReply`); CrewAI's `LLMStreamChunkEvent`s are never involved.

Tool results are observed here under the model's own call ids, which are the ids the executor puts on the
tool turns (the calls themselves reach the run in the model's reply, before the tools run):
`ToolResultObserved` when the next model call carries the tool turn with that `tool_call_id`
(TOOL_CALL_RESULT; the executor calls the model right after a tool batch), plus `observe_messages()` for
the stage's final transcript (a `result_as_answer` tool or the iteration limit ends the loop without
another model call). CrewAI's `ToolUsage*Event`s carry no tool-call id and go to a global bus, so they are
not used. Only ids this instance saw the model produce are reported, never tool turns from the history.

Cancellation: `close()` cancels the call in flight (its worker thread gets `StageCancelledError` at once)
and refuses later calls, so a cancelled run stops calling the model even though CrewAI's threads cannot be
interrupted.

Importing: this module does not import CrewAI (the run service imports `ModelCall` & co. on the app's
import path, and importing CrewAI costs ~10 s of CPU). `DelegatingLLM` is created on first access, after
`crewai_env.load_crewai()`; before that, accessing it raises `CrewAIEnvError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from agent_runtime.engine.flow.crewai_env import require_crewai_env
from agent_runtime.engine.flow.model_call import (
    CallModel,
    EventSink,
    ModelCall,
    StageCancelledError,
    StageOutputError,
    ToolResultObserved,
)
from agent_runtime.engine.flow.threads import waiting_for_the_loop
from agent_runtime.engine.flow.wire import (
    repair_instruction,
    strip_code_fence,
    wire_messages,
    wire_tools,
    with_schema_instruction,
)
from agent_runtime.engine.messages.metadata import ToolCallSpec

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
    _sink: EventSink | None = PrivateAttr(default=None)
    _issued_calls: dict[str, str] = PrivateAttr(default_factory=dict)
    _reported_results: set[str] = PrivateAttr(default_factory=set)
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
        max_json_retries: int = 2,
        inject_schema: bool = True,
        max_output_tokens: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> Self:
        """Build the LLM for one stage of one run. Call it from the event loop (or pass `loop`)."""
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
        llm._sink = sink
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

    def observe_messages(self, messages: list[dict[str, Any]] | list[LLMMessage]) -> None:
        """Report tool results in `messages` not reported yet (e.g. the stage's final transcript).

        Safe from any thread: the sink is always called on the event loop this LLM was built for.
        """
        for message in messages:
            if message.get("role") != "tool":
                continue
            call_id = str(message.get("tool_call_id") or "")
            if call_id not in self._issued_calls or call_id in self._reported_results:
                continue
            self._reported_results.add(call_id)
            content = message.get("content")
            self._emit(
                ToolResultObserved(
                    stage=self.stage,
                    call_id=call_id,
                    name=self._issued_calls[call_id],
                    content=content if isinstance(content, str) else json.dumps(content, ensure_ascii=False),
                )
            )

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
        wire = wire_messages(messages)
        self.observe_messages(wire)
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
            )
            reply = await call_model(request)
            if reply.tool_calls and offered_tools:
                return self._hand_over_tool_calls(reply.tool_calls)
            content = reply.content or ""
            if contract is None:
                return content
            try:
                parsed = contract.model_validate_json(strip_code_fence(content))
            except ValidationError as exc:
                if attempt >= self.max_json_retries:
                    raise StageOutputError(
                        f"stage {self.stage!r}: the model's answer did not match {contract.__name__} "
                        f"after {attempt + 1} attempts",
                        extra={"stage": self.stage, "attempts": attempt + 1},
                    ) from exc
                attempt += 1
                conversation = [
                    *conversation,
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": repair_instruction(exc)},
                ]
                continue
            # CrewAI wants the instance when it asked for a model; a tool stage's final answer goes back as
            # text and CrewAI validates it again into the kickoff's response_format (cheap, always valid).
            return parsed if response_model is not None else parsed.model_dump_json()

    def _hand_over_tool_calls(self, tool_calls: list[ToolCallSpec]) -> list[dict[str, Any]]:
        for tool_call in tool_calls:
            self._issued_calls[tool_call.id] = tool_call.name
        return [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in tool_calls
        ]

    def _emit(self, event: ToolResultObserved) -> None:
        if self._sink is None:
            return
        loop = self._require_loop()
        if _running_loop() is loop:
            self._sink(event)
        else:
            # observe_messages() called from the thread that drives the flow: the sink belongs to the loop.
            loop.call_soon_threadsafe(self._sink, event)

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
