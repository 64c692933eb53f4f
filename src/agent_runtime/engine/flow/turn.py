"""The agent's one entry point: `run_turn` takes a turn's input and the ports it needs (call the model, hand over
tool results, the tools and whose they are) and returns how the turn ended. Stage names, routes and which stage
answers live behind it (the CrewAI flow: engine/flow/crewai/flow.py; a stage: engine/flow/stage.py).

Importing this module does not import CrewAI (seconds of CPU): `load_agent` does, off the event loop at warm-up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, Field

from agent_runtime.engine.conversation.chat_messages import ChatMessage
from agent_runtime.engine.conversation.convert import to_wire
from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.contracts import IntentResult
from agent_runtime.engine.flow.crewai import bookkeeping
from agent_runtime.engine.flow.crewai import env as crewai_env
from agent_runtime.engine.flow.model_call import CallModel, EventSink, IntentSink, ToolCallsPending
from agent_runtime.engine.flow.stage import MAX_TOOL_ITERATIONS
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.tools import ToolRegistry
from agent_runtime.engine.loop_executor import Job
from agent_runtime.engine.profiles.models import UserAgentContext

_FLOW_MODULE = "agent_runtime.engine.flow.crewai.flow"

RESUMED_STAGE: Final = "execution"
"""The stage a turn that stopped for tool calls goes on in: the only one that may call tools."""
RESUMED_ROUTE: Final = "NEEDS_EXECUTION"
"""The route of a turn that goes on in `RESUMED_STAGE`."""


class TurnInput(BaseModel):
    """`history` is the memory window before this turn, `user_input` the turn's message. A turn resumed after it
    stopped for approvals or frontend tools passes the intent it decided and the tool calls and results so far
    (`continuation`): it goes on in `RESUMED_STAGE`."""

    system_prompt: str
    history: list[ChatMessage] = Field(default_factory=list)
    user_input: str
    ai_language: str
    intent: IntentResult | None = None
    intent_answer: str | None = Field(default=None, description="The intent answer as the model wrote it.")
    intent_reasoning: str | None = Field(default=None, description="The intent answer's reasoning (thinking mode).")
    continuation: list[ChatMessage] = Field(default_factory=list)


@dataclass(frozen=True)
class TurnPorts:
    """What the run gives the agent: its model calls (streamed, billed: the run's gateway), where tool results go
    (`on_tool_result`, on the loop, in the model's call order), the tools the YAML may grant and whose they are."""

    call_model: CallModel
    on_tool_result: EventSink | None
    tools: ToolRegistry
    user: UserAgentContext
    # Hears the intent a turn decided before its execution stage begins (None: nobody needs it).
    on_intent: IntentSink | None = None


@dataclass(frozen=True)
class AgentConfig:
    templates: FlowTemplates
    max_json_retries: int = 2
    max_tool_iterations: int = MAX_TOOL_ITERATIONS


class TurnAnswered(BaseModel):
    kind: Literal["answered"] = "answered"
    route: str
    answer_stage: str = Field(description="The stage whose output is the answer (its call streamed it).")
    assistant_text: str


class TurnSuspended(BaseModel):
    """The model asked for tools the run may not run by itself (approval or frontend tools): the turn waits."""

    kind: Literal["suspended"] = "suspended"
    route: str
    stage: str
    calls: list[ToolCallSpec]
    intent: IntentResult
    intent_answer: str | None = Field(description="The intent answer's bytes, for the resumed turn to send again.")
    intent_reasoning: str | None = Field(description="Its reasoning (thinking mode), sent again with it.")


TurnOutcome = TurnAnswered | TurnSuspended


def prepare_agent(data_dir: Path) -> None:
    """Cheap, at start-up: CrewAI's offline environment, so that its later import stays offline and in `data_dir`."""
    crewai_env.configure_crewai_env(data_dir)


def is_agent_bookkeeping(job: Job) -> bool:
    """A job the agent hands to the loop's default executor that never blocks, so it runs inline
    (engine/loop_executor.py): the CrewAI Flow's bookkeeping (engine/flow/crewai/bookkeeping.py)."""
    return bookkeeping.is_bookkeeping(job)


def load_agent(data_dir: Path) -> None:
    """Slow (CrewAI's import): call it off the event loop, once, before the first turn."""
    crewai_env.load_crewai(data_dir)
    bookkeeping.unregister_flow_telemetry()
    importlib.import_module(_FLOW_MODULE)


async def run_turn(turn: TurnInput, ports: TurnPorts, config: AgentConfig) -> TurnOutcome:
    """One turn of the agent, on the caller's loop. Model and tool errors reach the caller unchanged; a cancel
    stops the model call and cuts the tools in flight (engine/flow/stage_tools.py)."""
    from agent_runtime.engine.flow.crewai.flow import AgentFlow, AgentFlowState, FlowDeps

    state = AgentFlowState(
        system_prompt=turn.system_prompt,
        history=[dict(to_wire(message)) for message in turn.history],
        user_input=turn.user_input,
        ai_language=turn.ai_language,
        intent=turn.intent,
        intent_answer=turn.intent_answer,
        intent_reasoning=turn.intent_reasoning,
        continuation=[dict(to_wire(message)) for message in turn.continuation],
    )
    deps = FlowDeps(
        call_model=ports.call_model,
        templates=config.templates,
        user_context=ports.user,
        tool_registry=ports.tools,
        sink=ports.on_tool_result,
        on_intent=ports.on_intent,
        max_json_retries=config.max_json_retries,
        max_tool_iterations=config.max_tool_iterations,
    )
    flow = AgentFlow.for_turn(state, deps)
    try:
        await flow.kickoff_async()
    except ToolCallsPending as stop:
        final: AgentFlowState = flow.state
        intent = final.intent
        if intent is None:
            raise RuntimeError("a turn stopped for tool calls before its intent was decided") from stop
        return TurnSuspended(
            route=intent.route,
            stage=stop.stage,
            calls=stop.calls,
            intent=intent,
            intent_answer=final.intent_answer,
            intent_reasoning=final.intent_reasoning,
        )
    final = flow.state
    if final.route is None or final.assistant_text is None:
        raise RuntimeError("the flow finished without an answer")
    answer_stage = "intent" if final.route == "DIRECT_EXECUTION" else "organization"
    return TurnAnswered(route=final.route, answer_stage=answer_stage, assistant_text=final.assistant_text)
