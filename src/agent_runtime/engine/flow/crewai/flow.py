"""The three-stage agent flow: the official CrewAI `Flow` routes the stages, each stage a coroutine of ours.

    intent --route--> DIRECT_EXECUTION  -> direct_answer   (1 model call)
                  \\-> NEEDS_EXECUTION  -> execution (tools) -> organization

`@start`, `@router` and `@listen` are CrewAI's; every step awaits `engine/flow/stage.py`'s `run_stage` on the app's
event loop, where the model calls and tools run (docs/crewai-notes.md: why not CrewAI's agents and their executor).
The flow is kicked off on the app's loop too: its own bookkeeping is a few hundred microseconds of CPU per run.

What the model sees (engine/flow/prompt.py says why: DeepSeek's cache hits only whole prefixes it has seen): each
stage's call repeats the previous stage's call and answer as they were, and adds its own request after them.

    system:    the run's system prompt: policy, all three stages' instructions, profile (`prompt.py`)
    ...        the session's history (user/assistant/tool turns as stored; each user turn as its intent call sent it)
    user:      the user's turn, then a line naming the intent contract (the intent stage's request)
    assistant: the intent answer (JSON), then, for execution: "Stage: execution\\n<request>\\n<closing line>",
               tool calls and results; for organization, after the execution answer: "Stage: organization ..."
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import Field, PrivateAttr

from agent_runtime.engine.flow.contracts import (
    ExecutionResult,
    IntentResult,
    OrganizationResult,
    StageResult,
    intent_request,
)
from agent_runtime.engine.flow.crewai.env import require_crewai_env
from agent_runtime.engine.flow.model_call import CallModel, EventSink, IntentDecided, IntentSink
from agent_runtime.engine.flow.prompt import StagePromptPayload, build_stage_prompt_payload
from agent_runtime.engine.flow.stage import MAX_TOOL_ITERATIONS, StageSpec, run_stage
from agent_runtime.engine.flow.stage_tools import StageTools
from agent_runtime.engine.flow.templates import (
    ExecutionVariables,
    FlowTemplates,
    IntentVariables,
    OrganizationVariables,
)
from agent_runtime.engine.flow.tools import ToolRegistry
from agent_runtime.engine.flow.wire import WireTurn, answer_turn
from agent_runtime.engine.profiles.models import UserAgentContext
from agent_runtime.observability.runs import stage_observed

require_crewai_env()

from crewai.flow.flow import Flow, FlowState, listen, router, start  # noqa: E402

Route = Literal["DIRECT_EXECUTION", "NEEDS_EXECUTION"]


@dataclass(frozen=True)
class _Answering:
    """What of a stage the client sees: the route it belongs to, and whether (and on which route) its answer is the
    turn's answer, streamed."""

    route: Route | None = None
    streams_answer: bool = False
    answer_route: Route | None = None


# The intent stage answers only on the short-circuit; the organization stage always answers, on the long route.
_INTENT = _Answering(streams_answer=True, answer_route="DIRECT_EXECUTION")
_EXECUTION = _Answering(route="NEEDS_EXECUTION")
_ORGANIZATION = _Answering(route="NEEDS_EXECUTION", streams_answer=True)
_ContractT = TypeVar("_ContractT", bound=StageResult)


class AgentFlowState(FlowState):
    """Inputs of one turn and what each stage produced."""

    system_prompt: str = ""
    # Chat-completions wire dicts (engine.conversation.convert.to_wire): what every stage's messages start with.
    history: list[dict[str, Any]] = Field(default_factory=list)
    user_input: str = ""
    ai_language: str = "en"
    # A turn resumed after approvals or frontend tool results: the execution stage's tool calls and results so
    # far (wire dicts, after its request), and the intent decided by the run that stopped.
    continuation: list[dict[str, Any]] = Field(default_factory=list)

    intent: IntentResult | None = None
    # The intent answer as the model wrote it: a resumed turn re-sends these bytes (the provider's cache holds them).
    intent_answer: str | None = None
    intent_reasoning: str | None = None
    execution: ExecutionResult | None = None
    organization: OrganizationResult | None = None
    route: Route | None = None
    assistant_text: str | None = None


@dataclass(frozen=True)
class FlowDeps:
    """What a turn's stages need besides its state: the ports (`call_model`, `sink`) and the configuration.

    The execution stage gets the tools its YAML agent names, looked up in `tool_registry` and bound to
    `user_context` (the model never supplies whose data a tool reads); the YAML's approval tools it never runs.
    """

    call_model: CallModel
    templates: FlowTemplates
    user_context: UserAgentContext
    tool_registry: ToolRegistry
    sink: EventSink | None = None
    on_intent: IntentSink | None = None
    max_json_retries: int = 2
    max_tool_iterations: int = MAX_TOOL_ITERATIONS


class AgentFlow(Flow[AgentFlowState]):
    """One turn: `await AgentFlow.for_turn(state, deps).kickoff_async()` on the app's loop."""

    # Without this every Flow builds a LanceDB-backed memory (a slow first build, files under storage).
    _skip_auto_memory: bool = True

    _deps: FlowDeps | None = PrivateAttr(default=None)
    # Each finished stage's transcript: the next stage's messages start with it.
    _transcripts: dict[str, list[WireTurn]] = PrivateAttr(default_factory=dict)

    @classmethod
    def for_turn(cls, state: AgentFlowState, deps: FlowDeps) -> AgentFlow:
        flow = cls(initial_state=state, suppress_flow_events=True)
        flow._deps = deps
        return flow

    @start()
    async def intent(self) -> IntentResult:
        state: AgentFlowState = self.state
        if state.intent is not None:
            return state.intent  # a resumed turn: decided by the run that stopped for approvals
        state.intent = await self._stage(self._intent_payload(), IntentResult, self._turn_start(), _INTENT)
        answer = self._transcripts["intent"][-1]
        state.intent_answer = str(answer["content"])
        state.intent_reasoning = answer.get("reasoning_content")
        on_intent = self._require_deps().on_intent
        if on_intent is not None and state.intent.route == "NEEDS_EXECUTION":
            decided = IntentDecided(
                user_input=state.user_input,
                intent=state.intent,
                intent_answer=state.intent_answer,
                intent_reasoning=state.intent_reasoning,
            )
            await on_intent(decided)
        return state.intent

    @router(intent)
    async def route_intent(self) -> Route:
        state: AgentFlowState = self.state
        state.route = _required(state.intent, "intent").route
        return state.route

    @listen("DIRECT_EXECUTION")
    async def direct_answer(self) -> str:
        state: AgentFlowState = self.state
        state.assistant_text = _required(_required(state.intent, "intent").assistant_text, "intent.assistant_text")
        return state.assistant_text

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
        payload = build_stage_prompt_payload("execution", templates=self._require_deps().templates, variables=variables)
        messages = [*self._after("intent"), {"role": "user", "content": payload.request}, *state.continuation]
        state.execution = await self._stage(payload, ExecutionResult, messages, _EXECUTION)
        return state.execution

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
        templates = self._require_deps().templates
        payload = build_stage_prompt_payload("organization", templates=templates, variables=variables)
        messages = [*self._after("execution"), {"role": "user", "content": payload.request}]
        state.organization = await self._stage(payload, OrganizationResult, messages, _ORGANIZATION)
        state.assistant_text = state.organization.assistant_text
        return state.assistant_text

    def _intent_payload(self) -> StagePromptPayload:
        state: AgentFlowState = self.state
        variables = IntentVariables(user_input=state.user_input, ai_language=state.ai_language)
        return build_stage_prompt_payload("intent", templates=self._require_deps().templates, variables=variables)

    def _turn_start(self) -> list[WireTurn]:
        """What every stage call of the turn starts with: the system prompt, the history (its user turns as their
        intent calls sent them), the intent stage's request (the user's turn and the line naming its contract)."""
        state: AgentFlowState = self.state
        system = [{"role": "system", "content": state.system_prompt}] if state.system_prompt else []
        history = [
            {**turn, "content": intent_request(turn["content"])} if turn["role"] == "user" else turn
            for turn in state.history
        ]
        return [*system, *history, {"role": "user", "content": self._intent_payload().request}]

    def _after(self, stage: str) -> list[WireTurn]:
        """The messages a later stage starts with: the call that gave `stage`'s answer, and that answer. A resumed
        turn has no intent call in this run: its intent answer is the one the stopped run decided."""
        transcript = self._transcripts.get(stage)
        if transcript is not None:
            return transcript
        state: AgentFlowState = self.state
        answer = state.intent_answer
        if answer is None:  # a turn suspended before the answer's bytes were kept
            answer = _required(state.intent, "intent").model_dump_json()
        return [*self._turn_start(), answer_turn(answer, state.intent_reasoning)]

    async def _stage(
        self, payload: StagePromptPayload, contract: type[_ContractT], messages: list[WireTurn], answering: _Answering
    ) -> _ContractT:
        deps = self._require_deps()
        task = deps.templates.stage(payload.stage).task
        tools = None
        if payload.agent.tools:
            # Only the execution agent may be granted tools (enforced when the templates load).
            toolset = deps.tool_registry.build_for_run(payload.agent.tools, deps.user_context)
            refused = deps.templates.stage(payload.stage).agent.requires_approval
            tools = StageTools(toolset, sink=deps.sink, refused=refused)
        spec = StageSpec(
            stage=payload.stage,
            contract=contract,
            max_tokens=task.max_tokens,
            role=payload.agent.role,
            tools=tools,
            max_json_retries=deps.max_json_retries,
            max_tool_iterations=deps.max_tool_iterations,
            route=answering.route,
            streams_answer=answering.streams_answer,
            answer_route=answering.answer_route,
        )
        with stage_observed(payload.stage):
            answer = await run_stage(spec, messages, deps.call_model)
        self._transcripts[payload.stage] = answer.transcript
        return answer.result

    def _require_deps(self) -> FlowDeps:
        if self._deps is None:
            raise RuntimeError("AgentFlow was built without dependencies; use AgentFlow.for_turn()")
        return self._deps


_T = TypeVar("_T")


def _required(value: _T | None, what: str) -> _T:
    if value is None:
        raise RuntimeError(f"flow state is missing {what}")
    return value


__all__ = ["AgentFlow", "AgentFlowState", "FlowDeps", "Route"]
