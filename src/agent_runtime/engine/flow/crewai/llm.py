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
repair turn (the bad answer's text + what was wrong: its validation errors, or that it was blank, or cut at
the output limit (finish_reason "length"), or called tools where none may be called; the contract named by
its schema title, as the system prompt holds all three stages' schemas) and is asked again, at most
`max_json_retries` times, then `StageOutputError`. A repair call never lets the model call tools
(`ModelCall.allow_tools`): offered them again, a model that answered in prose after a tool result calls the
same tool again, until CrewAI's repeated-call guard ends the stage. Doing it here keeps it bounded and
visible: CrewAI's own fallback for a tool stage's bad final answer is a `Converter` call whose failure is
swallowed (the output's `pydantic` is `None`). What CrewAI itself raises on model behaviour (an identical
tool call repeated, arguments it cannot take) becomes `StageOutputError` too (here, or in `crew_flow`).

Thinking: a reply's reasoning (`ModelReply.reasoning`) is remembered under the ids of the tool calls handed
over with it and put back (`reasoning_content`) on the assistant turn carrying those calls in every later
call of the stage: CrewAI rebuilds that turn without it, and DeepSeek's thinking mode answers 400 when the
reasoning of a tool-call turn is not sent back. History turns keep theirs as they come (CrewAI passes the
key through). The reasoning of an answer without tool calls is never sent back.

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

from agent_runtime.engine.flow.crewai.env import require_crewai_env
from agent_runtime.engine.flow.crewai.threads import waiting_for_the_loop
from agent_runtime.engine.flow.crewai.wire import (
    refused_tool_calls,
    repair_instruction,
    wire_messages,
    wire_tools,
    with_schema_instruction,
)
from agent_runtime.engine.flow.model_call import (
    CallModel,
    EventSink,
    ModelCall,
    ModelReply,
    StageCancelledError,
    StageOutputError,
    ToolResultObserved,
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
    _sink: EventSink | None = PrivateAttr(default=None)
    _issued_calls: dict[str, str] = PrivateAttr(default_factory=dict)
    # Tool call id -> the reasoning of the reply that made it (thinking mode), put back in the stage's later calls.
    _reasoning_by_call: dict[str, str] = PrivateAttr(default_factory=dict)
    _reported_results: set[str] = PrivateAttr(default_factory=set)
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

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The messages of the call whose answer the stage accepted (repair turns left out), then that answer as the
        model wrote it: the next stage of the turn starts with exactly these, so the provider's cache holds all of
        it (engine/flow/prompt.py). Empty until the stage has an accepted answer."""
        return list(self._transcript)

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
        wire = _without_request_end(wire_messages(messages, self._reasoning_by_call))
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
            if _arguments_crewai_cannot_take(tool_call.arguments):
                raise StageOutputError(
                    f"stage {self.stage!r}: the model called {tool_call.name} with arguments that are not "
                    "a JSON object",
                    extra={"stage": self.stage},
                )
        for tool_call in reply.tool_calls:
            self._issued_calls[tool_call.id] = tool_call.name
            if reply.reasoning is not None:
                self._reasoning_by_call[tool_call.id] = reply.reasoning
        return [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
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


REQUEST_END = "\u2063"
"""The flow's CrewAI `prompt_template` (engine/flow/crewai/flow.py). CrewAI writes a stage's request as
`<request>\n<prompt_template>`; the model gets the request alone, byte for byte what the flow wrote (for the intent
stage, the user's own turn), so that later calls repeat it exactly (the provider caches whole prefixes)."""
_REQUEST_SUFFIX = "\n" + REQUEST_END


def _without_request_end(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for message in wire:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.endswith(_REQUEST_SUFFIX):
            message["content"] = content.removesuffix(_REQUEST_SUFFIX)
    return wire


def _refuse_available_functions(available_functions: dict[str, Any] | None) -> None:
    if available_functions:
        raise NotImplementedError(
            "DelegatingLLM returns tool calls to CrewAI's executor; LLM-side tool execution "
            "(available_functions, used by CrewAI planning/reasoning) is not supported: disable planning"
        )


def _arguments_crewai_cannot_take(arguments: str) -> bool:
    # CrewAI (1.15.30, agent_executor._execute_single_native_tool_call) tells the model when a tool call's
    # arguments are not JSON, runs a falsy JSON value as {} and a string into the tool's error; a list, a
    # number or true breaks its ToolUsageStartedEvent (pydantic), outside its error handling.
    try:
        value = json.loads(arguments)
    except ValueError:
        return False
    return bool(value) and not isinstance(value, dict | str)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
