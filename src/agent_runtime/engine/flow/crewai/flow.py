"""The three-stage agent flow on CrewAI: `Flow` for the stages, one CrewAI `Agent` per stage.

    intent --route--> DIRECT_EXECUTION  -> direct_answer   (1 model call)
                  \\-> NEEDS_EXECUTION  -> execution (tools) -> organization

Each stage is one CrewAI `Agent` run with `Agent.kickoff_async(messages, response_format=<contract>)` and a
`DelegatingLLM` (llm.py) built for that stage of this run, so every model call goes through our LLM layer (chosen
over `Crew.akickoff()` per stage by measurement: docs/crewai-notes.md). With the run service's `FlowThreads`, the
flow is driven on a private loop in a `crewai-flow` thread (threads.py says why); model calls and tools always run
on the app's loop, where our LLM layer and tools live.

What the model sees (engine/flow/prompt.py says why: DeepSeek's cache hits only whole prefixes it has seen): each
stage's call repeats the previous stage's call and answer as they were, and adds its own request after them.

    system:    the run's system prompt: policy, all three stages' instructions, profile (`prompt.py`)
    ...        the session's history (user/assistant/tool turns as stored)
    user:      the user's turn (the intent stage's request: nothing else is added to it)
    assistant: the intent answer (JSON), then, for execution: "Stage: execution\n<request>\n<closing line>",
               tool calls and results; for organization, after the execution answer: "Stage: organization ..."

CrewAI builds the request message from its prompt templates: by default they wrap it in the agent's role,
backstory and goal ("You are {role}. ...\nCurrent Task: ..."), which would put the stage's static texts after the
history again. The agent's `system_template` "{input}" and `prompt_template` `wire.REQUEST_END` make it
"<request>\n<REQUEST_END>", and `DelegatingLLM` strips the marker: the model gets our request byte for byte
(`use_system_prompt=False` keeps CrewAI from adding a stage-specific system message in front of the history).

Kept away: CrewAI's memory, sqlite and temp files, its own context summarisation and planning
(docs/crewai-notes.md). Tools reach CrewAI as `RuntimeToolAdapter`s (tools.py), which run them on the app's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from pydantic import Field, PrivateAttr

from agent_runtime.engine.conversation.chat_messages import ChatMessage
from agent_runtime.engine.conversation.convert import to_wire
from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult
from agent_runtime.engine.flow.crewai.env import require_crewai_env
from agent_runtime.engine.flow.crewai.llm import DelegatingLLM
from agent_runtime.engine.flow.crewai.threads import FlowThreads
from agent_runtime.engine.flow.crewai.tool_results import RunToolCalls
from agent_runtime.engine.flow.crewai.tools import RuntimeToolAdapter, ToolCalls
from agent_runtime.engine.flow.crewai.wire import REQUEST_END
from agent_runtime.engine.flow.model_call import MAX_TOOL_ITERATIONS, CallModel, EventSink, StageOutputError
from agent_runtime.engine.flow.prompt import StagePromptPayload, build_stage_prompt_payload
from agent_runtime.engine.flow.templates import (
    ExecutionVariables,
    FlowTemplates,
    IntentVariables,
    OrganizationVariables,
)
from agent_runtime.engine.flow.tools import BUILTIN_TOOLS, ToolRegistry
from agent_runtime.engine.profiles.models import UserAgentContext
from agent_runtime.observability.runs import stage_observed

require_crewai_env()

from crewai import Agent  # noqa: E402
from crewai.flow.flow import Flow, FlowState, listen, router, start  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402
from crewai.tools.tool_failure import ToolExecutionFailedError  # noqa: E402

if TYPE_CHECKING:
    from crewai.utilities.types import LLMMessage

Route = Literal["DIRECT_EXECUTION", "NEEDS_EXECUTION"]
_ContractT = TypeVar("_ContractT", IntentResult, ExecutionResult, OrganizationResult)


class AgentFlowState(FlowState):
    """Inputs of one run and what each stage produced (the audit rows are written from this)."""

    system_prompt: str = ""
    # Adapter boundary: the history as chat-completions wire dicts (engine.memory.convert.to_wire).
    history: list[dict[str, Any]] = Field(default_factory=list)
    user_input: str = ""
    ai_language: str = "en"
    # A turn resumed after approvals or frontend tool results: the execution stage's tool calls and results so
    # far (wire dicts, after its request), and the intent decided by the run that stopped.
    continuation: list[dict[str, Any]] = Field(default_factory=list)

    intent: IntentResult | None = None
    execution: ExecutionResult | None = None
    organization: OrganizationResult | None = None
    route: Route | None = None
    assistant_text: str | None = None


@dataclass(frozen=True)
class FlowDeps:
    """What a run needs besides its state; `call_model` and `sink` are bound to the run by the caller.

    The execution stage gets the tools its YAML agent names, looked up in `tool_registry` and bound to
    `user_context` (the model never supplies whose data a tool reads). `max_tool_iterations` is CrewAI's
    `max_iter` for a stage (model calls in its tool loop before it must answer). `threads`: where the flow
    runs (see the module docstring); None runs it on the caller's loop.
    """

    call_model: CallModel
    model: str
    templates: FlowTemplates
    user_context: UserAgentContext
    tool_registry: ToolRegistry = BUILTIN_TOOLS
    sink: EventSink | None = None
    max_json_retries: int = 2
    max_tool_iterations: int = MAX_TOOL_ITERATIONS
    threads: FlowThreads | None = None
    # Never run by CrewAI: the run stops at the model's call and runs them itself once approved.
    approval_tools: frozenset[str] = frozenset()


class AgentFlow(Flow[AgentFlowState]):
    """One run. Build with `AgentFlow.for_run(state, deps)` on the event loop, then `await run()`."""

    # Without this every Flow builds a LanceDB-backed memory (a slow first build, files under storage).
    _skip_auto_memory: bool = True

    _deps: FlowDeps | None = PrivateAttr(default=None)
    _llms: list[DelegatingLLM] = PrivateAttr(default_factory=list)
    _tool_calls: ToolCalls = PrivateAttr(default_factory=ToolCalls)
    _tool_results: RunToolCalls | None = PrivateAttr(default=None)
    # Each finished stage's transcript (DelegatingLLM.transcript): the next stage's messages start with it.
    _transcripts: dict[str, list[dict[str, Any]]] = PrivateAttr(default_factory=dict)
    # The app's event loop: model calls and tools run there, whichever loop drives the flow.
    _app_loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)

    @classmethod
    def for_run(cls, state: AgentFlowState, deps: FlowDeps) -> AgentFlow:
        flow = cls(initial_state=state, suppress_flow_events=True)
        flow._deps = deps
        flow._app_loop = asyncio.get_running_loop()
        flow._tool_results = RunToolCalls(deps.sink, flow._app_loop)
        return flow

    async def run(self) -> AgentFlowState:
        """Run the stages; on any failure or cancellation, stop the stages' pending model calls."""
        threads = self._require_deps().threads
        try:
            if threads is not None:
                # Off the app's loop, which then lags less under concurrent runs (docs/crewai-notes.md).
                await threads.run(self.kickoff_async)
            else:
                await self.kickoff_async()
        except BaseException:
            self.close()
            raise
        state: AgentFlowState = self.state
        if state.assistant_text is None:
            raise RuntimeError("the flow finished without an assistant_text")
        return state

    def close(self) -> None:
        self._tool_calls.cancel_all()
        for llm in self._llms:
            llm.close()

    # -- stages --------------------------------------------------------------------------------------

    @start()
    async def intent(self) -> IntentResult:
        state: AgentFlowState = self.state
        if state.intent is not None:
            return state.intent  # a resumed turn: decided by the run that stopped for approvals
        variables = IntentVariables(user_input=state.user_input, ai_language=state.ai_language)
        payload = build_stage_prompt_payload("intent", templates=self._require_deps().templates, variables=variables)
        result = await self._run_stage(payload, IntentResult)
        state.intent = result
        return result

    @router(intent)
    async def route_intent(self) -> Route:
        state: AgentFlowState = self.state
        intent = _required(state.intent, "intent")
        state.route = intent.route
        return intent.route

    @listen("DIRECT_EXECUTION")
    async def direct_answer(self) -> str:
        state: AgentFlowState = self.state
        text = _required(_required(state.intent, "intent").assistant_text, "intent.assistant_text")
        state.assistant_text = text
        return text

    @listen("NEEDS_EXECUTION")
    async def execution(self) -> ExecutionResult:
        state: AgentFlowState = self.state
        intent = _required(state.intent, "intent")
        variables = ExecutionVariables(
            user_input=state.user_input,
            ai_language=state.ai_language,
            intent_summary=intent.intent_summary,
            execution_brief=_required(intent.execution_brief, "intent.execution_brief"),
        )
        payload = build_stage_prompt_payload(
            "execution",
            templates=self._require_deps().templates,
            variables=variables,
        )
        result = await self._run_stage(payload, ExecutionResult)
        state.execution = result
        return result

    @listen(execution)
    async def organization(self) -> str:
        state: AgentFlowState = self.state
        intent = _required(state.intent, "intent")
        variables = OrganizationVariables(
            user_input=state.user_input,
            ai_language=state.ai_language,
            intent_summary=intent.intent_summary,
            execution_report=_required(state.execution, "execution"),
        )
        payload = build_stage_prompt_payload(
            "organization",
            templates=self._require_deps().templates,
            variables=variables,
        )
        result = await self._run_stage(payload, OrganizationResult)
        state.organization = result
        state.assistant_text = result.assistant_text
        return result.assistant_text

    # -- one stage = one CrewAI agent ----------------------------------------------------------------

    def _turn_start(self) -> list[dict[str, Any]]:
        """What every stage call of the turn starts with: the system prompt, the history, the user's turn."""
        state: AgentFlowState = self.state
        system = [{"role": "system", "content": state.system_prompt}] if state.system_prompt else []
        return [*system, *state.history, {"role": "user", "content": state.user_input}]

    def _after(self, stage: str) -> list[dict[str, Any]]:
        """The messages a later stage starts with: the call that gave `stage`'s answer, and that answer. A resumed
        turn has no intent call in this run: its intent answer is the one the stopped run decided."""
        transcript = self._transcripts.get(stage)
        if transcript is not None:
            return transcript
        state: AgentFlowState = self.state
        intent = _required(state.intent, "intent")
        return [*self._turn_start(), {"role": "assistant", "content": intent.model_dump_json()}]

    async def _run_stage(self, payload: StagePromptPayload, contract: type[_ContractT]) -> _ContractT:
        deps = self._require_deps()
        stage = payload.stage
        llm = DelegatingLLM.for_stage(
            deps.call_model,
            stage=stage,
            model=deps.model,
            output_model=contract,
            tool_calls=self._require_tool_results(),
            max_json_retries=deps.max_json_retries,
            # The YAML task renders {output_schema} (enforced when the templates load).
            inject_schema=False,
            max_output_tokens=deps.templates.stage(stage).task.max_tokens,
            loop=self._require_app_loop(),
        )
        self._llms.append(llm)
        agent = Agent(
            role=payload.agent.role,
            goal=payload.agent.goal,
            backstory=payload.agent.backstory,
            llm=llm,
            # Only the execution agent may be granted tools (enforced when the templates load).
            tools=self._stage_tools(payload.agent.tools),
            max_iter=deps.max_tool_iterations,
            # See the module docstring: the user message is our request and its closing line, nothing else.
            system_template="{input}",
            prompt_template=REQUEST_END,
            use_system_prompt=False,
            respect_context_window=False,
            use_better_compaction=False,
            allow_delegation=False,
            verbose=False,
        )
        with stage_observed(stage):
            try:
                output = await agent.kickoff_async(self._messages(stage, payload.request), contract)
            except ToolExecutionFailedError as exc:
                # CrewAI's end of a stage whose model keeps making the same tool call and getting the same
                # result (MAX_REPEATED_TOOL_CALLS; the only tool failure it raises on under the default policy).
                raise StageOutputError(
                    f"stage {stage!r}: {exc.record.failure.message}",
                    extra={"stage": stage, "tool": exc.record.tool_name},
                ) from exc
        # Tool results a final model call never saw (a result_as_answer tool, the iteration limit).
        self._require_tool_results().stage_ended(output.messages)
        self._transcripts[stage] = llm.transcript
        result = output.pydantic
        if not isinstance(result, contract):
            raise StageOutputError(f"stage {stage!r} produced no {contract.__name__}", extra={"stage": stage})
        return result

    def _messages(self, stage: str, request: str) -> list[LLMMessage]:
        state: AgentFlowState = self.state
        if stage == "intent":
            messages = self._turn_start()  # the request is the user's turn itself
        elif stage == "execution":
            # CrewAI keeps messages after the request (its "trailing" turns) after it: the resumed tool loop.
            messages = [*self._after("intent"), {"role": "user", "content": request}, *state.continuation]
        else:
            messages = [*self._after("execution"), {"role": "user", "content": request}]
        # Adapter boundary: wire dicts are what CrewAI's LLMMessage TypedDict describes.
        return cast("list[LLMMessage]", messages)

    def _stage_tools(self, names: Sequence[str]) -> list[BaseTool]:
        if not names:
            return []
        deps = self._require_deps()
        loop = self._require_app_loop()
        toolset = deps.tool_registry.build_for_run(names, deps.user_context)
        return [
            RuntimeToolAdapter.wrap(
                deps.tool_registry.get(name),
                toolset,
                loop,
                self._tool_calls,
                self._require_tool_results(),
                requires_approval=name in deps.approval_tools,
            )
            for name in names
        ]

    def _require_deps(self) -> FlowDeps:
        if self._deps is None:
            raise RuntimeError("AgentFlow was built without dependencies; use AgentFlow.for_run()")
        return self._deps

    def _require_tool_results(self) -> RunToolCalls:
        if self._tool_results is None:
            raise RuntimeError("AgentFlow was built without its tool calls; use AgentFlow.for_run()")
        return self._tool_results

    def _require_app_loop(self) -> asyncio.AbstractEventLoop:
        if self._app_loop is None:
            raise RuntimeError("AgentFlow was built without the app's event loop; use AgentFlow.for_run()")
        return self._app_loop


def build_state(
    *,
    system_prompt: str,
    history: Sequence[ChatMessage],
    user_input: str,
    ai_language: str,
    intent: IntentResult | None = None,
    continuation: Sequence[ChatMessage] = (),
) -> AgentFlowState:
    """The flow's input: `history` is the memory window (prior turns), `user_input` this turn's message.

    A turn resumed after it stopped for approvals or frontend tools passes the intent it decided and the
    execution stage's tool calls and results so far (`continuation`): the flow goes on in that stage.
    """
    return AgentFlowState(
        system_prompt=system_prompt,
        history=[dict(to_wire(message)) for message in history],
        user_input=user_input,
        ai_language=ai_language,
        intent=intent,
        continuation=[dict(to_wire(message)) for message in continuation],
    )


async def run_agent_flow(state: AgentFlowState, deps: FlowDeps) -> AgentFlowState:
    """Run one turn of the agent; returns the final state (stage results, route, assistant_text)."""
    return await AgentFlow.for_run(state, deps).run()


_T = TypeVar("_T")


def _required(value: _T | None, what: str) -> _T:
    if value is None:
        raise RuntimeError(f"flow state is missing {what}")
    return value


__all__ = [
    "AgentFlow",
    "AgentFlowState",
    "FlowDeps",
    "build_state",
    "run_agent_flow",
]
