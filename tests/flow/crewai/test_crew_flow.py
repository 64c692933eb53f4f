"""The three-stage AgentFlow on CrewAI, end to end, with a scripted fake model (offline, no network)."""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
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
from agent_runtime.engine.flow.crewai import env as crewai_env

# CrewAI must be configured offline before it is imported; its storage then stays for the process.
_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-tests-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

from crewai.tools.tool_failure import ToolExecutionFailedError  # noqa: E402

from agent_runtime.engine.conversation.chat_messages import AssistantMessage, ChatMessage, UserMessage  # noqa: E402
from agent_runtime.engine.conversation.metadata import ToolCallSpec  # noqa: E402
from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult  # noqa: E402
from agent_runtime.engine.flow.crewai.flow import (  # noqa: E402
    AgentFlowState,
    FlowDeps,
    build_state,
    run_agent_flow,
)
from agent_runtime.engine.flow.crewai.threads import FlowThreads  # noqa: E402
from agent_runtime.engine.flow.model_call import (  # noqa: E402
    CallModel,
    ModelCall,
    ModelReply,
    StageOutputError,
    StageToolResult,
)
from agent_runtime.engine.flow.prompt import build_global_system_prompt  # noqa: E402
from agent_runtime.engine.flow.templates import FlowTemplates, load_flow_templates  # noqa: E402
from agent_runtime.engine.flow.tools import (  # noqa: E402
    CalculatorArgs,
    CalculatorTool,
    CurrentTimeTool,
    ToolRegistry,
    UpdateBioTool,
    engine_tools,
)
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
EXECUTION_REQUEST = (
    "Stage: execution\nCarry out the execution_brief of your intent answer above.\n"
    "Answer as the execution stage: only the ExecutionResult JSON object."
)
ORGANIZATION_REQUEST = (
    "Stage: organization\nWrite the reply to the user from your execution report above.\n"
    "Answer as the organization stage: only the OrganizationResult JSON object."
)


def USER(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


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
    events: list[StageToolResult] | None = None,
    *,
    tool_registry: ToolRegistry = TOOLS,
    max_json_retries: int = 2,
    runner: FlowRunner = "thread",
) -> FlowDeps:
    return FlowDeps(
        call_model=model,
        model="deepseek/deepseek-flash",
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
    # A plain chat: the system prompt (which holds every stage's static texts), the history, the user's turn as
    # they wrote it, so that the next turn repeats this call's input in full.
    assert call.messages == [{"role": "system", "content": SYSTEM_PROMPT}, *HISTORY_WIRE, USER("How are you?")]
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
    events: list[StageToolResult] = []
    deps = deps_for(
        model,
        events,
        tool_registry=ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL, TOOLS.get("forget_memory")]),
        runner=runner,
    )

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
        {
            "type": "function",
            "function": {
                "name": "forget_memory",
                "description": "Delete what the assistant remembers about the user that matches the given text "
                "(long-term memory; runs only after the user approves).",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "what": {
                            "description": "What to forget, as the user said it, e.g. 'I live in Paris'.",
                            "maxLength": 500,
                            "minLength": 1,
                            "title": "What",
                            "type": "string",
                        }
                    },
                    "required": ["what"],
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
        StageToolResult(
            stage="execution", call_id="call_abc123", name="calculator", content=tool_turn["content"], is_error=False
        ),
    ]

    # Each call repeats the one before it and its answer, byte for byte, and adds its own request: the provider's
    # cache holds every prefix but the new part.
    start = [{"role": "system", "content": SYSTEM_PROMPT}, *HISTORY_WIRE, USER("What is 17 + 25?")]
    assert model.calls[0].messages == start
    intent_answer = {"role": "assistant", "content": NEEDS.model_dump_json()}
    assert model.calls[1].messages == [*start, intent_answer, USER(EXECUTION_REQUEST)]
    assert model.calls[2].messages == [*model.calls[1].messages, tool_call_turn, tool_turn]
    execution_answer = {"role": "assistant", "content": EXECUTED.model_dump_json()}
    assert model.calls[3].messages == [*model.calls[2].messages, execution_answer, USER(ORGANIZATION_REQUEST)]
    assert [call.json_mode for call in model.calls] == [True, True, True, True]


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
    async def one_run(index: int) -> tuple[FakeModel, list[StageToolResult], AgentFlowState]:
        call = ToolCallSpec(id=f"call_{index}", name="calculator", arguments=f'{{"expression": "{index} + 1"}}')
        model = FakeModel(
            {
                "intent": [reply(NEEDS)],
                "execution": [ModelReply(tool_calls=[call]), reply(EXECUTED)],
                "organization": [ModelReply(content=json.dumps({"assistant_text": f"run {index}"}))],
            },
            delay=0.01,
        )
        events: list[StageToolResult] = []
        state = await run_agent_flow(state_for(f"run {index}"), deps_for(model, events))
        return model, events, state

    results = await asyncio.gather(*(one_run(index) for index in range(6)))

    for index, (model, events, state) in enumerate(results):
        assert state.assistant_text == f"run {index}"
        assert len(model.calls) == 4
        # Every call of the run carries that run's turn, and only that run's.
        turns = [
            [m["content"] for m in call.messages if m["content"] and "run " in m["content"]] for call in model.calls
        ]
        assert turns == [[f"run {index}"]] * 4
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

    # No LanceDB memory, no sqlite task outputs, no deferred tool-result files: only CrewAI's consent record and
    # the key its `import` creates for its login tokens (moved here from $HOME by env.py).
    assert _files_under(storage) == [".crewai_user.json", f"{crewai_env.CREDENTIALS_SUBDIR}/secret.key"]


def _files_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file())


# -- model behaviour a strict DeepSeek stand-in showed: every case ends in a stage result or StageOutputError ----

SECOND_CALL = ToolCallSpec(id="call_def456", name="calculator", arguments='{"expression": "1 + 1"}')
SCHEMA_TITLES = {"intent": "IntentResult", "execution": "ExecutionResult", "organization": "OrganizationResult"}
NOT_JSON = "(root): Invalid JSON: expected value at line 1 column 1"
REFUSED = "it called calculator, but no tool can be called in this answer"
CUT = "it was cut off at the output limit, so the JSON is incomplete; keep the answer shorter"


def repair_turn(stage: str, problem: str) -> dict[str, str]:
    title = SCHEMA_TITLES[stage]
    return {
        "role": "user",
        "content": f"Your previous answer could not be used: {problem}. "
        f"Answer again with only the {title} JSON object (the schema titled {title} in the system prompt).",
    }


def tool_turns(call: ToolCallSpec, result: str, reasoning: str | None = None) -> list[dict[str, object]]:
    """The assistant tool-call turn and the tool turn as CrewAI's executor builds them (plus the reasoning)."""
    assistant: dict[str, object] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        ],
    }
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    return [assistant, {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result}]


def attempts(model: FakeModel, stage: str) -> list[tuple[int, bool]]:
    return [(call.attempt, call.allow_tools) for call in model.calls if call.stage == stage]


def calls_of(model: FakeModel, stage: str) -> list[ModelCall]:
    return [call for call in model.calls if call.stage == stage]


@BOTH_RUNNERS
async def test_prose_after_a_tool_result_is_repaired_without_tools(runner: FlowRunner) -> None:
    calculator = RecordingCalculator()
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), ModelReply(content="The sum is 42."), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    deps = deps_for(
        model,
        tool_registry=ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL, TOOLS.get("forget_memory")]),
        runner=runner,
    )

    state = await run_agent_flow(state_for("What is 17 + 25?"), deps)

    assert state.execution == EXECUTED
    assert state.assistant_text == ORGANIZED.assistant_text
    assert len(calculator.ran_on) == 1
    # The repair may not call a tool (the tools are still listed for the gateway: tool_choice "none").
    assert attempts(model, "execution") == [(0, True), (0, True), (1, False)]
    after_tool, repair = calls_of(model, "execution")[1:]
    assert repair.tools == after_tool.tools
    assert repair.messages == [
        *after_tool.messages,
        {"role": "assistant", "content": "The sum is 42."},
        repair_turn("execution", NOT_JSON),
    ]


@pytest.mark.parametrize("then", ["answers", "calls again"])
async def test_a_tool_call_in_a_repair_is_refused_and_never_run(then: str) -> None:
    calculator = RecordingCalculator()
    refused = ModelReply(tool_calls=[SECOND_CALL])
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [
                ModelReply(tool_calls=[TOOL_CALL]),
                ModelReply(content="The sum is 42."),
                refused,
                reply(EXECUTED) if then == "answers" else refused,
            ],
            "organization": [reply(ORGANIZED)],
        }
    )
    events: list[StageToolResult] = []
    deps = deps_for(
        model, events, tool_registry=ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL, TOOLS.get("forget_memory")])
    )

    if then == "answers":
        assert (await run_agent_flow(state_for(), deps)).execution == EXECUTED
    else:
        with pytest.raises(StageOutputError, match=r"stage 'execution'.*ExecutionResult after 3 attempts"):
            await run_agent_flow(state_for(), deps)

    assert attempts(model, "execution") == [(0, True), (0, True), (1, False), (2, False)]
    assert len(calculator.ran_on) == 1
    assert [event.call_id for event in events] == [TOOL_CALL.id]
    _, after_tool, _, last = calls_of(model, "execution")
    assert last.messages == [
        *after_tool.messages,
        {"role": "assistant", "content": "The sum is 42."},
        repair_turn("execution", NOT_JSON),
        {"role": "assistant", "content": ""},
        repair_turn("execution", REFUSED),
    ]


async def test_tool_calls_in_a_stage_without_tools_are_refused() -> None:
    model = FakeModel({"intent": [ModelReply(tool_calls=[TOOL_CALL]), reply(DIRECT)]})

    state = await run_agent_flow(state_for(), deps_for(model))

    assert state.assistant_text == DIRECT.assistant_text
    first, repair = model.calls
    assert (first.tools, repair.tools) == (None, None)
    assert attempts(model, "intent") == [(0, True), (1, False)]
    assert repair.messages == [*first.messages, {"role": "assistant", "content": ""}, repair_turn("intent", REFUSED)]


async def test_a_tool_call_after_the_iteration_limit_is_refused() -> None:
    # At max_iter CrewAI asks for the final answer without tools; the model calls one anyway.
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), ModelReply(tool_calls=[SECOND_CALL]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    deps = dataclasses.replace(deps_for(model), max_tool_iterations=1)

    state = await run_agent_flow(state_for(), deps)

    assert state.execution == EXECUTED
    _, forced, repair = calls_of(model, "execution")
    assert (forced.tools, forced.allow_tools, repair.allow_tools) == (None, True, False)
    assert repair.messages == [
        *forced.messages,
        {"role": "assistant", "content": ""},
        repair_turn("execution", REFUSED),
    ]


BLANK_OR_CUT = [
    ModelReply(content="   \n  ", finish_reason="stop"),
    ModelReply(content='{"route": "NEEDS_EXECUTION", "intent_sum', finish_reason="length"),
    ModelReply(content=None, finish_reason="length"),
]


@pytest.mark.parametrize("stage", ["intent", "execution", "organization"])
@pytest.mark.parametrize(
    ("bad", "problem"),
    [(BLANK_OR_CUT[0], "it was blank"), (BLANK_OR_CUT[1], CUT), (BLANK_OR_CUT[2], CUT)],
    ids=["blank", "cut", "empty-at-the-limit"],
)
async def test_blank_and_cut_answers_are_repaired_on_every_stage(stage: str, bad: ModelReply, problem: str) -> None:
    good = {"intent": reply(NEEDS), "execution": reply(EXECUTED), "organization": reply(ORGANIZED)}
    model = FakeModel({name: [bad, answer] if name == stage else [answer] for name, answer in good.items()})

    state = await run_agent_flow(state_for(), deps_for(model))

    assert (state.intent, state.execution, state.organization) == (NEEDS, EXECUTED, ORGANIZED)
    assert attempts(model, stage) == [(0, True), (1, False)]
    first, repair = calls_of(model, stage)
    assert repair.messages == [
        *first.messages,
        {"role": "assistant", "content": bad.content or ""},
        repair_turn(stage, problem),
    ]
    # The title names one of the three schemas the system prompt holds.
    assert f'"title":"{SCHEMA_TITLES[stage]}"' in SYSTEM_PROMPT


@BOTH_RUNNERS
async def test_an_identical_tool_call_repeated_ends_the_stage_as_invalid_model_output(runner: FlowRunner) -> None:
    model = FakeModel({"intent": [reply(NEEDS)], "execution": [ModelReply(tool_calls=[TOOL_CALL])]})

    with pytest.raises(StageOutputError) as raised:
        await run_agent_flow(state_for(), deps_for(model, runner=runner))

    role = TEMPLATES.execution.agent.role
    assert raised.value.message == (
        f"stage 'execution': Agent '{role}' called 'calculator' with the same arguments 5 times "
        "and got the same result each time. Stopped because it is not making progress."
    )
    assert raised.value.extra == {"stage": "execution", "tool": "calculator"}
    assert raised.value.code == "invalid_model_output"
    # What CrewAI raises for it (crewai.tools.tool_failure, MAX_REPEATED_TOOL_CALLS = 5).
    assert type(raised.value.__cause__) is ToolExecutionFailedError
    assert model.stages() == ["intent", *["execution"] * 5]


@pytest.mark.parametrize(
    ("call", "result"),
    [
        (ToolCallSpec(id="call_x", name="web_search", arguments="{}"), "Tool not found"),
        (
            ToolCallSpec(id="call_x", name="calculator", arguments='{"expression": "17 +'),
            "Error: Failed to parse tool arguments as JSON: Unterminated string starting at: line 1 column 16 "
            "(char 15). Please provide valid JSON arguments for the 'calculator' tool.",
        ),
    ],
    ids=["unknown-tool", "arguments-cut"],
)
async def test_a_bad_tool_call_gets_crewai_error_as_its_result_and_the_stage_goes_on(
    call: ToolCallSpec, result: str
) -> None:
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[call]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    events: list[StageToolResult] = []

    state = await run_agent_flow(state_for(), deps_for(model, events))

    assert state.execution == EXECUTED
    first, second = calls_of(model, "execution")
    assert second.messages == [*first.messages, *tool_turns(call, result)]
    assert events == [
        StageToolResult(stage="execution", call_id="call_x", name=call.name, content=result, is_error=False)
    ]


@pytest.mark.parametrize("arguments", ["[1, 2]", "42", "true"])
async def test_tool_arguments_that_crewai_cannot_take_end_the_stage_as_invalid_model_output(arguments: str) -> None:
    calculator = RecordingCalculator()
    call = ToolCallSpec(id="call_x", name="calculator", arguments=arguments)
    model = FakeModel({"intent": [reply(NEEDS)], "execution": [ModelReply(tool_calls=[call]), reply(EXECUTED)]})
    deps = deps_for(
        model, tool_registry=ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL, TOOLS.get("forget_memory")])
    )

    with pytest.raises(StageOutputError) as raised:
        await run_agent_flow(state_for(), deps)

    assert raised.value.message == (
        "stage 'execution': the model called calculator with arguments that are not a JSON object"
    )
    assert calculator.ran_on == []
    assert model.stages() == ["intent", "execution"]


@BOTH_RUNNERS
async def test_reasoning_of_tool_calls_goes_back_in_the_stage_later_calls(runner: FlowRunner) -> None:
    model = FakeModel(
        {
            "intent": [ModelReply(content=NEEDS.model_dump_json(), reasoning="needs a tool")],
            "execution": [
                ModelReply(tool_calls=[TOOL_CALL], reasoning="add them"),
                ModelReply(tool_calls=[SECOND_CALL], reasoning="check 1 + 1 too"),
                ModelReply(content="The sums are 42 and 2.", reasoning="prose first"),
                ModelReply(content=EXECUTED.model_dump_json(), reasoning="as JSON"),
            ],
            "organization": [ModelReply(content=ORGANIZED.model_dump_json(), reasoning="say it")],
        }
    )

    await run_agent_flow(state_for(), deps_for(model, runner=runner))

    first, second, third, repair = calls_of(model, "execution")
    calculator_17 = tool_turns(TOOL_CALL, '{"expression":"17 + 25","result":"42"}', reasoning="add them")
    calculator_1 = tool_turns(SECOND_CALL, '{"expression":"1 + 1","result":"2"}', reasoning="check 1 + 1 too")
    assert second.messages == [*first.messages, *calculator_17]
    assert third.messages == [*first.messages, *calculator_17, *calculator_1]
    # An answer's reasoning (no tool calls) never goes back.
    assert repair.messages == [
        *third.messages,
        {"role": "assistant", "content": "The sums are 42 and 2."},
        repair_turn("execution", NOT_JSON),
    ]
    for call in [*calls_of(model, "intent"), first]:
        assert all("reasoning_content" not in message for message in call.messages)
    # The organization stage continues the execution transcript (repair turns left out), tool reasoning included.
    (organization,) = calls_of(model, "organization")
    assert organization.messages == [
        *third.messages,
        {"role": "assistant", "content": EXECUTED.model_dump_json()},
        USER(ORGANIZATION_REQUEST),
    ]


async def test_reasoning_in_the_history_and_a_resumed_stage_reaches_the_model_unchanged() -> None:
    # conversation.convert.to_wire keeps reasoning_content on tool-call turns; CrewAI must pass the key through.
    old_call = ToolCallSpec(id="call_old", name="current_time", arguments="{}")
    history = [
        {"role": "user", "content": "What time is it?"},
        *tool_turns(old_call, '{"time": "09:00"}', reasoning="look at the clock"),
        {"role": "assistant", "content": "It is 9."},
    ]
    continuation = tool_turns(TOOL_CALL, '{"expression":"17 + 25","result":"42"}', reasoning="add them")
    state = AgentFlowState(
        system_prompt=SYSTEM_PROMPT,
        history=history,
        user_input="And 17 + 25?",
        ai_language="en",
        intent=NEEDS,
        continuation=continuation,
    )
    model = FakeModel({"execution": [reply(EXECUTED)], "organization": [reply(ORGANIZED)]})

    await run_agent_flow(state, deps_for(model))

    execution, organization = model.calls
    # A resumed turn: the intent answer is the one the stopped run decided, then the stage goes on.
    assert execution.messages == [
        {"role": "system", "content": SYSTEM_PROMPT},
        *history,
        USER("And 17 + 25?"),
        {"role": "assistant", "content": NEEDS.model_dump_json()},
        USER(EXECUTION_REQUEST),
        *continuation,
    ]
    assert organization.messages[: len(execution.messages)] == execution.messages


class SlowFirstCalculator(CalculatorTool):
    """The real calculator; the first expression it gets finishes after the second."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[str] = []

    async def execute(self, args: CalculatorArgs, ctx: UserAgentContext) -> BaseModel:
        if not self.finished and args.expression == "1 / 0":
            await asyncio.sleep(0.2)
        try:
            return await super().execute(args, ctx)
        finally:
            self.finished.append(args.expression)


async def test_tool_results_are_handed_over_as_they_finish_in_the_models_call_order() -> None:
    calculator = SlowFirstCalculator()
    events: list[StageToolResult] = []
    seen_by_the_follow_up: list[list[StageToolResult]] = []
    first = ToolCallSpec(id="call_a", name="calculator", arguments='{"expression": "1 / 0"}')
    second = ToolCallSpec(id="call_b", name="calculator", arguments='{"expression": "2 + 2"}')
    scripted = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[first, second]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )

    async def model(request: ModelCall) -> ModelReply:
        if request.stage == "execution" and len(scripted.calls) == 2:
            seen_by_the_follow_up.append(list(events))
        return await scripted(request)

    deps = deps_for(
        model, events, tool_registry=ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL, TOOLS.get("forget_memory")])
    )
    await run_agent_flow(state_for("What is 1 / 0 and 2 + 2?"), deps)

    failed = StageToolResult(
        stage="execution",
        call_id="call_a",
        name="calculator",
        content=json.dumps({"error": "division by zero"}),
        is_error=True,
    )
    worked = StageToolResult(
        stage="execution",
        call_id="call_b",
        name="calculator",
        content=json.dumps({"expression": "2 + 2", "result": "4"}, separators=(",", ":")),
        is_error=False,
    )
    assert calculator.finished == ["2 + 2", "1 / 0"]  # CrewAI ran the two calls in parallel
    # Handed over by the tools themselves, before the model is called again, and in the order the model called.
    assert seen_by_the_follow_up == [[failed, worked]]
    assert events == [failed, worked]
