"""The three-stage AgentFlow on CrewAI, end to end, with a scripted fake model (offline, no network)."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Literal
from uuid import UUID

import pytest
from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.flow import crewai_env

# CrewAI must be configured offline before it is imported; its storage then stays for the process.
_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-tests-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult  # noqa: E402
from agent_runtime.engine.flow.crew_flow import (  # noqa: E402
    AgentFlowState,
    FlowDeps,
    build_state,
    run_agent_flow,
)
from agent_runtime.engine.flow.model_call import (  # noqa: E402
    CallModel,
    ModelCall,
    ModelReply,
    StageOutputError,
    ToolResultObserved,
)
from agent_runtime.engine.flow.prompt import build_global_system_prompt  # noqa: E402
from agent_runtime.engine.flow.templates import FlowTemplates, load_flow_templates  # noqa: E402
from agent_runtime.engine.flow.threads import FlowThreads  # noqa: E402
from agent_runtime.engine.flow.tools import (  # noqa: E402
    CalculatorArgs,
    CalculatorTool,
    CurrentTimeTool,
    ToolRegistry,
    UpdateBioTool,
    engine_tools,
)
from agent_runtime.engine.memory.messages import AssistantMessage, ChatMessage, UserMessage  # noqa: E402
from agent_runtime.engine.messages.metadata import ToolCallSpec  # noqa: E402
from agent_runtime.engine.profiles.models import ProfileSettingsV2, UserAgentContext  # noqa: E402
from agent_runtime.resources import default_config_dir  # noqa: E402

# CrewAI reads its own deprecated fields internally on every Agent construction.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai.*")

FlowRunner = Literal["thread", "loop"]
BOTH_RUNNERS = pytest.mark.parametrize("runner", ["thread", "loop"])
# "thread": the production set-up (the run service's bounded pools); "loop": the flow on the test's own loop.
FLOW_THREADS = FlowThreads(4, cpu_slots=1)

TEMPLATES: FlowTemplates = load_flow_templates(default_config_dir() / "crewai")
CONTEXT = UserAgentContext(user_id=UUID(int=7), username="mia", bio="likes maths", settings=ProfileSettingsV2())
SYSTEM_PROMPT = build_global_system_prompt(CONTEXT, TEMPLATES)
HISTORY: list[ChatMessage] = [UserMessage(content="hi there"), AssistantMessage(content="Hello! How can I help?")]
HISTORY_WIRE = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "Hello! How can I help?"}]

DIRECT = IntentResult(route="DIRECT_EXECUTION", assistant_text="Doing well, thanks!", intent_summary="small talk")
NEEDS = IntentResult(route="NEEDS_EXECUTION", intent_summary="add numbers", execution_brief="Compute 17 + 25.")
EXECUTED = ExecutionResult(
    status="SUCCESS", execution_summary="17 + 25 = 42", execution_data={"result": "42"}, report_brief="Say 42."
)
ORGANIZED = OrganizationResult(assistant_text="17 + 25 is 42.")
TOOL_CALL = ToolCallSpec(id="call_abc123", name="calculator", arguments='{"expression": "17 + 25"}')


def reply(result: IntentResult | ExecutionResult | OrganizationResult) -> ModelReply:
    return ModelReply(content=result.model_dump_json())


class FakeModel:
    """Scripted replies per stage, in order (the last one repeats); records every request."""

    def __init__(self, script: dict[str, list[ModelReply | BaseException]], delay: float = 0.0) -> None:
        self.script = {stage: list(replies) for stage, replies in script.items()}
        self.calls: list[ModelCall] = []
        self.delay = delay

    async def __call__(self, request: ModelCall) -> ModelReply:
        self.calls.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        replies = self.script[request.stage]
        answer = replies.pop(0) if len(replies) > 1 else replies[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def stages(self) -> list[str]:
        return [call.stage for call in self.calls]


class UnusedBioWriter:
    """The YAML grants update_bio (approval required): these flows never get as far as running it."""

    async def set_bio(self, ctx: RequestContext, bio: str) -> str:
        raise AssertionError("update_bio must not run in these tests")


TOOLS = engine_tools(UnusedBioWriter())
BIO_TOOL = UpdateBioTool(UnusedBioWriter())


class RecordingCalculator(CalculatorTool):
    """The real calculator, noting where it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.ran_on: list[tuple[asyncio.AbstractEventLoop, int]] = []

    async def execute(self, args: CalculatorArgs, ctx: UserAgentContext) -> BaseModel:
        self.ran_on.append((asyncio.get_running_loop(), threading.get_ident()))
        return await super().execute(args, ctx)


def deps_for(
    model: CallModel,
    events: list[ToolResultObserved] | None = None,
    *,
    tool_registry: ToolRegistry = TOOLS,
    max_json_retries: int = 2,
    runner: FlowRunner = "thread",
) -> FlowDeps:
    return FlowDeps(
        call_model=model,
        model="deepseek/deepseek-chat",
        templates=TEMPLATES,
        user_context=CONTEXT,
        tool_registry=tool_registry,
        sink=events.append if events is not None else None,
        max_json_retries=max_json_retries,
        threads=FLOW_THREADS if runner == "thread" else None,
    )


def state_for(user_input: str = "How are you?") -> AgentFlowState:
    return build_state(system_prompt=SYSTEM_PROMPT, history=HISTORY, user_input=user_input, ai_language="en")


async def test_direct_route_is_one_model_call_that_sees_system_prompt_history_and_task() -> None:
    model = FakeModel({"intent": [reply(DIRECT)]})

    state = await run_agent_flow(state_for("How are you?"), deps_for(model))

    assert state.route == "DIRECT_EXECUTION"
    assert state.assistant_text == "Doing well, thanks!"
    assert state.intent == DIRECT
    assert state.execution is None and state.organization is None
    assert model.stages() == ["intent"]
    call = model.calls[0]
    assert call.json_mode is True
    assert call.tools is None
    assert "response_format" not in json.dumps(call.model_dump())
    system, *history, request = call.messages
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert history == HISTORY_WIRE
    # The stage's request alone: its static texts (agent, task, schema) are in the system prompt, not here.
    assert request == {
        "role": "user",
        "content": "Stage: intent\n"
        'The user\'s latest message (a JSON string): "How are you?"\n'
        'Reply language (a BCP-47 tag): "en"\n'
        "Answer as the intent stage: only the IntentResult JSON object.",
    }
    assert TEMPLATES.intent.agent.role in SYSTEM_PROMPT
    assert '"title":"IntentResult"' in SYSTEM_PROMPT


@BOTH_RUNNERS
async def test_needs_execution_runs_the_tool_on_the_app_loop_in_four_model_calls(runner: FlowRunner) -> None:
    calculator = RecordingCalculator()
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    events: list[ToolResultObserved] = []
    deps = deps_for(model, events, tool_registry=ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL]), runner=runner)

    state = await run_agent_flow(state_for("What is 17 + 25?"), deps)

    assert model.stages() == ["intent", "execution", "execution", "organization"]
    assert state.route == "NEEDS_EXECUTION"
    assert state.execution == EXECUTED
    assert state.organization == ORGANIZED
    assert state.assistant_text == "17 + 25 is 42."

    # The tool ran once, on the app's event loop (not in a throwaway loop on a worker thread).
    assert calculator.ran_on == [(asyncio.get_running_loop(), threading.get_ident())]

    offered = model.calls[1].tools
    assert offered is not None
    # The whole schemas the model gets, as CrewAI builds them from our tools' args models.
    assert offered == [
        {
            "type": "function",
            "function": {
                "name": "current_time",
                "description": "Get the current local date, time and weekday in the user's time zone. "
                "Takes no arguments.",
                "parameters": {"additionalProperties": False, "properties": {}, "type": "object", "required": []},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": "Evaluate an arithmetic expression exactly (decimal arithmetic) and return the result.",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "expression": {
                            "description": "Arithmetic expression: numbers, + - * / // % **, parentheses, sqrt(x), "
                            "abs(x), round(x) or round(x, digits), floor(x), ceil(x). "
                            "Example: (12.5 + 7) * 3 / sqrt(16)",
                            "maxLength": 200,
                            "minLength": 1,
                            "title": "Expression",
                            "type": "string",
                        }
                    },
                    "required": ["expression"],
                    "type": "object",
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "update_bio",
                "description": "Replace the user's profile bio with the given text "
                "(runs only after the user approves).",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "bio": {
                            "description": "The new bio, in full.",
                            "maxLength": 4000,
                            "minLength": 1,
                            "title": "Bio",
                            "type": "string",
                        }
                    },
                    "required": ["bio"],
                    "type": "object",
                },
            },
        },
    ]
    # The follow-up execution call carries the model's tool call and the result under the same id.
    *_, tool_call_turn, tool_turn = model.calls[2].messages
    assert tool_call_turn["tool_calls"][0]["id"] == "call_abc123"
    assert tool_turn["role"] == "tool"
    assert tool_turn["tool_call_id"] == "call_abc123"
    assert json.loads(tool_turn["content"]) == {"expression": "17 + 25", "result": "42"}

    assert events == [
        ToolResultObserved(stage="execution", call_id="call_abc123", name="calculator", content=tool_turn["content"]),
    ]

    # Every stage starts from the same prefix (system prompt + history) and never sees another stage's turns.
    for call in model.calls:
        assert call.messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert call.messages[1:3] == HISTORY_WIRE
        assert call.json_mode is True
    organization_request = model.calls[3].messages[-1]["content"]
    assert len(model.calls[3].messages) == 4
    assert '"execution_summary": "17 + 25 = 42"' in organization_request


async def test_invalid_json_then_valid_json_recovers() -> None:
    model = FakeModel({"intent": [ModelReply(content="Sure, here you go: {route: DIRECT}"), reply(DIRECT)]})

    state = await run_agent_flow(state_for(), deps_for(model))

    assert state.assistant_text == DIRECT.assistant_text
    assert [(call.stage, call.attempt) for call in model.calls] == [("intent", 0), ("intent", 1)]
    assert model.calls[1].messages[-2] == {"role": "assistant", "content": "Sure, here you go: {route: DIRECT}"}


async def test_a_reply_that_breaks_the_contract_rules_is_repaired_too() -> None:
    # Valid JSON, but DIRECT_EXECUTION without assistant_text violates IntentResult's validator.
    broken = ModelReply(content=json.dumps({"route": "DIRECT_EXECUTION", "intent_summary": "hi"}))
    model = FakeModel({"intent": [broken, reply(DIRECT)]})

    state = await run_agent_flow(state_for(), deps_for(model))

    assert state.assistant_text == DIRECT.assistant_text
    assert "assistant_text is required" in model.calls[1].messages[-1]["content"]


@BOTH_RUNNERS
async def test_invalid_json_forever_fails_clearly_after_bounded_retries(runner: FlowRunner) -> None:
    model = FakeModel(
        {"intent": [reply(NEEDS)], "execution": [reply(EXECUTED)], "organization": [ModelReply(content="nope")]}
    )

    with pytest.raises(StageOutputError, match=r"stage 'organization'.*OrganizationResult after 3 attempts"):
        await run_agent_flow(state_for(), deps_for(model, max_json_retries=2, runner=runner))

    assert model.stages() == ["intent", "execution", "organization", "organization", "organization"]


async def test_model_errors_reach_the_caller_unchanged() -> None:
    class ProviderDown(Exception):
        pass

    model = FakeModel({"intent": [ProviderDown("HTTP 503")]})

    with pytest.raises(ProviderDown, match="503"):
        await run_agent_flow(state_for(), deps_for(model))
    assert len(model.calls) == 1


async def test_concurrent_runs_keep_their_calls_and_tool_events_apart() -> None:
    async def one_run(index: int) -> tuple[FakeModel, list[ToolResultObserved], AgentFlowState]:
        call = ToolCallSpec(id=f"call_{index}", name="calculator", arguments=f'{{"expression": "{index} + 1"}}')
        model = FakeModel(
            {
                "intent": [reply(NEEDS)],
                "execution": [ModelReply(tool_calls=[call]), reply(EXECUTED)],
                "organization": [ModelReply(content=json.dumps({"assistant_text": f"run {index}"}))],
            },
            delay=0.01,
        )
        events: list[ToolResultObserved] = []
        state = await run_agent_flow(state_for(f"run {index}"), deps_for(model, events))
        return model, events, state

    results = await asyncio.gather(*(one_run(index) for index in range(6)))

    for index, (model, events, state) in enumerate(results):
        assert state.assistant_text == f"run {index}"
        assert len(model.calls) == 4
        requests = [[m for m in call.messages if m["role"] == "user"][-1]["content"] for call in model.calls]
        assert all(f'"run {index}"' in request for request in requests)
        [result] = events
        assert (result.stage, result.call_id, result.name) == ("execution", f"call_{index}", "calculator")
        assert json.loads(result.content)["result"] == str(index + 1)


@BOTH_RUNNERS
async def test_cancelling_a_run_stops_its_model_calls(runner: FlowRunner) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()
    calls: list[ModelCall] = []

    async def slow_model(request: ModelCall) -> ModelReply:
        calls.append(request)
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return reply(DIRECT)

    run = asyncio.create_task(run_agent_flow(state_for(), deps_for(slow_model, runner=runner)))
    await asyncio.wait_for(started.wait(), 5)
    run.cancel()

    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.wait_for(cancelled.wait(), 5)
    await asyncio.sleep(0.1)  # the executor's worker thread unwinds; it must not call the model again
    assert len(calls) == 1


async def test_a_run_leaves_no_files_behind() -> None:
    storage = Path(os.environ[crewai_env.STORAGE_ENV])
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    await run_agent_flow(state_for(), deps_for(model))

    # No LanceDB memory, no sqlite task outputs, no deferred tool-result files: only CrewAI's consent record.
    assert _files_under(storage) == [".crewai_user.json"]


def _files_under(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.rglob("*") if path.is_file())
