"""One turn of the agent (`engine.flow.turn.run_turn`): the official CrewAI Flow routes our native stages, with a
scripted fake model (offline, no network). What each call sends is pinned message by message; the whole requests
of whole runs are pinned byte for byte by tests/runs/test_recorded_requests.py."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from uuid import UUID

import pytest
from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.chat_messages import AssistantMessage, ChatMessage, ToolMessage, UserMessage
from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.contracts import ExecutionResult, IntentResult, OrganizationResult
from agent_runtime.engine.flow.crewai import env as crewai_env
from agent_runtime.engine.flow.model_call import CallModel, ModelCall, ModelReply, StageOutputError, StageToolResult
from agent_runtime.engine.flow.prompt import build_global_system_prompt
from agent_runtime.engine.flow.template_files import load_flow_templates
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.tools import (
    CalculatorArgs,
    CalculatorTool,
    CurrentTimeTool,
    ToolRegistry,
    UpdateBioTool,
    engine_tools,
)
from agent_runtime.engine.flow.turn import (
    AgentConfig,
    TurnAnswered,
    TurnInput,
    TurnOutcome,
    TurnPorts,
    TurnSuspended,
    load_agent,
    run_turn,
)
from agent_runtime.engine.profiles.models import ProfileSettingsV2, UserAgentContext
from agent_runtime.resources import default_config_dir

# CrewAI must be configured offline before it is imported; its storage then stays for the process.
_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-tests-{os.getpid()}"
load_agent(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

TEMPLATES: FlowTemplates = load_flow_templates(default_config_dir() / "crewai")
CONTEXT = UserAgentContext(user_id=UUID(int=7), username="mia", bio="likes maths", settings=ProfileSettingsV2())
SYSTEM_PROMPT = build_global_system_prompt(CONTEXT, TEMPLATES)
HISTORY: list[ChatMessage] = [UserMessage(content="hi there"), AssistantMessage(content="Hello! How can I help?")]
# As the intent call of that turn sent it: its user turn closed by the intent contract's line (engine/flow/prompt.py).
HISTORY_WIRE = [
    {"role": "user", "content": "hi there\n\nAnswer as the intent stage: only the IntentResult JSON object."},
    {"role": "assistant", "content": "Hello! How can I help?"},
]
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


def TURN(text: str) -> dict[str, str]:
    """The intent stage's request: the user's turn, closed by the line naming its contract."""
    return USER(f"{text}\n\nAnswer as the intent stage: only the IntentResult JSON object.")


DIRECT = IntentResult(route="DIRECT_EXECUTION", assistant_text="Doing well, thanks!", intent_summary="small talk")
NEEDS = IntentResult(route="NEEDS_EXECUTION", intent_summary="add numbers", execution_brief="Compute 17 + 25.")
EXECUTED = ExecutionResult(
    status="SUCCESS", execution_summary="17 + 25 = 42", execution_data={"result": "42"}, report_brief="Say 42."
)
ORGANIZED = OrganizationResult(assistant_text="17 + 25 is 42.")
TOOL_CALL = ToolCallSpec(id="call_abc123", name="calculator", arguments='{"expression": "17 + 25"}')
SECOND_CALL = ToolCallSpec(id="call_def456", name="calculator", arguments='{"expression": "1 + 1"}')


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
    """The YAML grants update_bio (approval required): these turns never get as far as running it."""

    async def set_bio(self, ctx: RequestContext, bio: str) -> str:
        raise AssertionError("update_bio must not run in these tests")


TOOLS = engine_tools(UnusedBioWriter())
BIO_TOOL = UpdateBioTool(UnusedBioWriter())
EXECUTION_TOOLS = ["current_time", "calculator", "update_bio", "forget_memory"]


class RecordingCalculator(CalculatorTool):
    """The real calculator, noting where it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.ran_on: list[tuple[asyncio.AbstractEventLoop, int]] = []

    async def execute(self, args: CalculatorArgs, ctx: UserAgentContext) -> BaseModel:
        self.ran_on.append((asyncio.get_running_loop(), threading.get_ident()))
        return await super().execute(args, ctx)


def with_calculator(calculator: CalculatorTool) -> ToolRegistry:
    return ToolRegistry([calculator, CurrentTimeTool(), BIO_TOOL, TOOLS.get("forget_memory")])


def turn_for(user_input: str = "How are you?") -> TurnInput:
    return TurnInput(system_prompt=SYSTEM_PROMPT, history=HISTORY, user_input=user_input, ai_language="en")


async def run(
    turn: TurnInput,
    model: CallModel,
    events: list[StageToolResult] | None = None,
    *,
    tools: ToolRegistry = TOOLS,
    max_json_retries: int = 2,
    max_tool_iterations: int = 6,
) -> TurnOutcome:
    ports = TurnPorts(
        call_model=model, on_tool_result=events.append if events is not None else None, tools=tools, user=CONTEXT
    )
    config = AgentConfig(
        templates=TEMPLATES, max_json_retries=max_json_retries, max_tool_iterations=max_tool_iterations
    )
    return await run_turn(turn, ports, config)


def answered(outcome: TurnOutcome) -> TurnAnswered:
    assert isinstance(outcome, TurnAnswered), outcome
    return outcome


async def test_direct_route_is_one_model_call_that_sees_system_prompt_history_and_task() -> None:
    model = FakeModel({"intent": [reply(DIRECT)]})

    outcome = await run(turn_for("How are you?"), model)

    assert outcome == TurnAnswered(
        route="DIRECT_EXECUTION", answer_stage="intent", assistant_text="Doing well, thanks!"
    )
    assert model.stages() == ["intent"]
    call = model.calls[0]
    assert call.json_mode is True
    assert call.tools is None
    assert "response_format" not in json.dumps(call.model_dump())
    # A plain chat: the system prompt (which holds every stage's static texts), the history, the user's turn as
    # they wrote it, so that the next turn repeats this call's input in full.
    assert call.messages == [{"role": "system", "content": SYSTEM_PROMPT}, *HISTORY_WIRE, TURN("How are you?")]
    assert call.max_tokens == TEMPLATES.intent.task.max_tokens
    assert TEMPLATES.intent.agent.role in SYSTEM_PROMPT
    assert '"title":"IntentResult"' in SYSTEM_PROMPT


async def test_needs_execution_runs_the_tool_on_the_app_loop_in_four_model_calls() -> None:
    calculator = RecordingCalculator()
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    events: list[StageToolResult] = []

    outcome = await run(turn_for("What is 17 + 25?"), model, events, tools=with_calculator(calculator))

    assert outcome == TurnAnswered(
        route="NEEDS_EXECUTION", answer_stage="organization", assistant_text="17 + 25 is 42."
    )
    assert model.stages() == ["intent", "execution", "execution", "organization"]
    # The tool ran once, on the app's event loop, in the run's task's thread.
    assert calculator.ran_on == [(asyncio.get_running_loop(), threading.get_ident())]

    # The execution stage offers the tools its YAML agent is granted, in that order; the others offer none.
    assert [tool.function.name for tool in model.calls[1].tools or []] == EXECUTION_TOOLS
    assert model.calls[1].tools == [with_calculator(calculator).get(name).openai_schema() for name in EXECUTION_TOOLS]
    assert (model.calls[0].tools, model.calls[3].tools) == (None, None)
    assert [call.max_tokens for call in model.calls] == [2048, 1024, 1024, 2048]
    # The follow-up execution call carries the model's tool call and the result under the same id.
    *_, tool_call_turn, tool_turn = model.calls[2].messages
    assert tool_call_turn == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc123",
                "type": "function",
                "function": {"name": "calculator", "arguments": TOOL_CALL.arguments},
            }
        ],
    }
    assert tool_turn == {
        "role": "tool",
        "tool_call_id": "call_abc123",
        "name": "calculator",
        "content": '{"expression":"17 + 25","result":"42"}',
    }
    assert events == [
        StageToolResult(
            stage="execution", call_id="call_abc123", name="calculator", content=tool_turn["content"], is_error=False
        ),
    ]

    # Each call repeats the one before it and its answer, byte for byte, and adds its own request: the provider's
    # cache holds every prefix but the new part.
    start = [{"role": "system", "content": SYSTEM_PROMPT}, *HISTORY_WIRE, TURN("What is 17 + 25?")]
    assert model.calls[0].messages == start
    intent_answer = {"role": "assistant", "content": NEEDS.model_dump_json()}
    assert model.calls[1].messages == [*start, intent_answer, USER(EXECUTION_REQUEST)]
    assert model.calls[2].messages == [*model.calls[1].messages, tool_call_turn, tool_turn]
    execution_answer = {"role": "assistant", "content": EXECUTED.model_dump_json()}
    assert model.calls[3].messages == [*model.calls[2].messages, execution_answer, USER(ORGANIZATION_REQUEST)]
    assert [call.json_mode for call in model.calls] == [True, True, True, True]


async def test_invalid_json_then_valid_json_recovers() -> None:
    model = FakeModel({"intent": [ModelReply(content="Sure, here you go: {route: DIRECT}"), reply(DIRECT)]})

    outcome = await run(turn_for(), model)

    assert answered(outcome).assistant_text == DIRECT.assistant_text
    assert [(call.stage, call.attempt) for call in model.calls] == [("intent", 0), ("intent", 1)]
    assert model.calls[1].messages[-2] == {"role": "assistant", "content": "Sure, here you go: {route: DIRECT}"}


async def test_a_reply_that_breaks_the_contract_rules_is_repaired_too() -> None:
    # Valid JSON, but DIRECT_EXECUTION without assistant_text violates IntentResult's validator.
    broken = ModelReply(content=json.dumps({"route": "DIRECT_EXECUTION", "intent_summary": "hi"}))
    model = FakeModel({"intent": [broken, reply(DIRECT)]})

    outcome = await run(turn_for(), model)

    assert answered(outcome).assistant_text == DIRECT.assistant_text
    assert "assistant_text is required" in model.calls[1].messages[-1]["content"]


async def test_a_complete_answer_that_hit_the_output_limit_is_used() -> None:
    # DeepSeek's JSON mode can pad a finished object with whitespace up to max_tokens.
    model = FakeModel({"intent": [ModelReply(content=DIRECT.model_dump_json() + "\n" * 40, finish_reason="length")]})

    outcome = await run(turn_for(), model)

    assert answered(outcome).assistant_text == DIRECT.assistant_text
    assert len(model.calls) == 1


async def test_invalid_json_forever_fails_clearly_after_bounded_retries() -> None:
    model = FakeModel(
        {"intent": [reply(NEEDS)], "execution": [reply(EXECUTED)], "organization": [ModelReply(content="nope")]}
    )

    with pytest.raises(StageOutputError, match=r"stage 'organization'.*OrganizationResult after 3 attempts"):
        await run(turn_for(), model, max_json_retries=2)

    assert model.stages() == ["intent", "execution", "organization", "organization", "organization"]


async def test_model_errors_reach_the_caller_unchanged() -> None:
    class ProviderDown(Exception):
        pass

    model = FakeModel({"intent": [ProviderDown("HTTP 503")]})

    with pytest.raises(ProviderDown, match="503"):
        await run(turn_for(), model)
    assert len(model.calls) == 1


async def test_concurrent_turns_keep_their_calls_and_tool_events_apart() -> None:
    async def one_run(index: int) -> tuple[FakeModel, list[StageToolResult], TurnOutcome]:
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
        outcome = await run(turn_for(f"run {index}"), model, events)
        return model, events, outcome

    results = await asyncio.gather(*(one_run(index) for index in range(6)))

    for index, (model, events, outcome) in enumerate(results):
        assert answered(outcome).assistant_text == f"run {index}"
        assert len(model.calls) == 4
        # Every call of the run carries that run's turn, and only that run's.
        turns = [
            [m["content"] for m in call.messages if m["content"] and "run " in m["content"]] for call in model.calls
        ]
        assert turns == [[TURN(f"run {index}")["content"]]] * 4
        [result] = events
        assert (result.stage, result.call_id, result.name) == ("execution", f"call_{index}", "calculator")
        assert json.loads(result.content)["result"] == str(index + 1)


async def test_cancelling_a_turn_stops_its_model_call() -> None:
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

    turn = asyncio.create_task(run(turn_for(), slow_model))
    await asyncio.wait_for(started.wait(), 5)
    turn.cancel()

    with pytest.raises(asyncio.CancelledError):
        await turn
    assert cancelled.is_set()
    await asyncio.sleep(0.1)
    assert len(calls) == 1


async def test_a_turn_leaves_no_files_behind() -> None:
    storage = Path(os.environ[crewai_env.STORAGE_ENV])
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    await run(turn_for(), model)

    # No LanceDB memory, no sqlite, no flow state files: only CrewAI's consent record and the key its `import`
    # creates for its login tokens (moved here from $HOME by env.py).
    assert _files_under(storage) == [".crewai_user.json", f"{crewai_env.CREDENTIALS_SUBDIR}/secret.key"]


def _files_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file())


# -- model behaviour a strict DeepSeek stand-in showed: every case ends in a stage result or StageOutputError ----

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
    """The assistant tool-call turn and the tool turn (plus the reasoning)."""
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


async def test_prose_after_a_tool_result_is_repaired_without_tools() -> None:
    calculator = RecordingCalculator()
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), ModelReply(content="The sum is 42."), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )

    outcome = await run(turn_for("What is 17 + 25?"), model, tools=with_calculator(calculator))

    assert answered(outcome).assistant_text == ORGANIZED.assistant_text
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
    # The organization stage continues the call whose answer was accepted, repair turns left out.
    (organization,) = calls_of(model, "organization")
    assert organization.messages == [
        *after_tool.messages,
        {"role": "assistant", "content": EXECUTED.model_dump_json()},
        USER(ORGANIZATION_REQUEST),
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

    if then == "answers":
        assert answered(await run(turn_for(), model, events, tools=with_calculator(calculator)))
    else:
        with pytest.raises(StageOutputError, match=r"stage 'execution'.*ExecutionResult after 3 attempts"):
            await run(turn_for(), model, events, tools=with_calculator(calculator))

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

    outcome = await run(turn_for(), model)

    assert answered(outcome).assistant_text == DIRECT.assistant_text
    first, repair = model.calls
    assert (first.tools, repair.tools) == (None, None)
    assert attempts(model, "intent") == [(0, True), (1, False)]
    assert repair.messages == [*first.messages, {"role": "assistant", "content": ""}, repair_turn("intent", REFUSED)]


async def test_after_the_last_round_of_tools_the_answer_is_asked_for_and_a_tool_call_refused() -> None:
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[TOOL_CALL]), ModelReply(tool_calls=[SECOND_CALL]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )

    outcome = await run(turn_for(), model, max_tool_iterations=1)

    assert answered(outcome).assistant_text == ORGANIZED.assistant_text
    first, forced, repair = calls_of(model, "execution")
    assert (forced.tools, forced.allow_tools, repair.allow_tools) == (None, True, False)
    assert forced.messages == [
        *first.messages,
        *tool_turns(TOOL_CALL, '{"expression":"17 + 25","result":"42"}'),
        USER(
            "Now it's time you MUST give your absolute best final answer. You'll ignore all previous instructions, "
            "stop using any tools, and just return your absolute BEST Final answer."
        ),
    ]
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

    outcome = await run(turn_for(), model)

    assert answered(outcome).assistant_text == ORGANIZED.assistant_text
    assert attempts(model, stage) == [(0, True), (1, False)]
    first, repair = calls_of(model, stage)
    assert repair.messages == [
        *first.messages,
        {"role": "assistant", "content": bad.content or ""},
        repair_turn(stage, problem),
    ]
    # The title names one of the three schemas the system prompt holds.
    assert f'"title":"{SCHEMA_TITLES[stage]}"' in SYSTEM_PROMPT


async def test_an_identical_tool_call_repeated_ends_the_stage_as_invalid_model_output() -> None:
    model = FakeModel({"intent": [reply(NEEDS)], "execution": [ModelReply(tool_calls=[TOOL_CALL])]})

    with pytest.raises(StageOutputError) as raised:
        await run(turn_for(), model)

    role = TEMPLATES.execution.agent.role
    assert raised.value.message == (
        f"stage 'execution': Agent '{role}' called 'calculator' with the same arguments 5 times "
        "and got the same result each time. Stopped because it is not making progress."
    )
    assert raised.value.extra == {"stage": "execution", "tool": "calculator"}
    assert raised.value.code == "invalid_model_output"
    assert model.stages() == ["intent", *["execution"] * 5]


@pytest.mark.parametrize(
    ("call", "result"),
    [
        (
            ToolCallSpec(id="call_x", name="web_search", arguments="{}"),
            "unknown tool 'web_search'; available: current_time, calculator, update_bio, forget_memory",
        ),
        (
            ToolCallSpec(id="call_x", name="calculator", arguments='{"expression": "17 +'),
            "invalid arguments: Invalid JSON: EOF while parsing a string at line 1 column 20",
        ),
        (
            ToolCallSpec(id="call_x", name="calculator", arguments="[1, 2]"),
            "invalid arguments: Input should be an object",
        ),
        (ToolCallSpec(id="call_x", name="calculator", arguments="42"), "invalid arguments: Input should be an object"),
    ],
    ids=["unknown-tool", "arguments-cut", "arguments-a-list", "arguments-a-number"],
)
async def test_a_bad_tool_call_gets_an_error_result_and_the_stage_goes_on(call: ToolCallSpec, result: str) -> None:
    calculator = RecordingCalculator()
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[call]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    events: list[StageToolResult] = []

    outcome = await run(turn_for(), model, events, tools=with_calculator(calculator))

    assert answered(outcome).assistant_text == ORGANIZED.assistant_text
    content = json.dumps({"error": result})
    first, second = calls_of(model, "execution")
    assert second.messages == [*first.messages, *tool_turns(call, content)]
    assert events == [
        StageToolResult(stage="execution", call_id="call_x", name=call.name, content=content, is_error=True)
    ]
    assert calculator.ran_on == []


async def test_the_reasoning_of_every_reply_goes_back_with_it_in_later_calls() -> None:
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

    await run(turn_for(), model)

    first, second, third, repair = calls_of(model, "execution")
    calculator_17 = tool_turns(TOOL_CALL, '{"expression":"17 + 25","result":"42"}', reasoning="add them")
    calculator_1 = tool_turns(SECOND_CALL, '{"expression":"1 + 1","result":"2"}', reasoning="check 1 + 1 too")
    assert second.messages == [*first.messages, *calculator_17]
    assert third.messages == [*first.messages, *calculator_17, *calculator_1]
    # An answer's reasoning goes back with it too (DeepSeek: every earlier assistant message of a request with tools).
    assert repair.messages == [
        *third.messages,
        {"role": "assistant", "content": "The sums are 42 and 2.", "reasoning_content": "prose first"},
        repair_turn("execution", NOT_JSON),
    ]
    (intent,) = calls_of(model, "intent")
    assert all("reasoning_content" not in message for message in intent.messages)
    assert first.messages[-2:] == [
        {"role": "assistant", "content": NEEDS.model_dump_json(), "reasoning_content": "needs a tool"},
        first.messages[-1],
    ]
    # The organization stage continues the execution transcript (repair turns left out), reasoning included.
    (organization,) = calls_of(model, "organization")
    assert organization.messages == [
        *third.messages,
        {"role": "assistant", "content": EXECUTED.model_dump_json(), "reasoning_content": "as JSON"},
        USER(ORGANIZATION_REQUEST),
    ]


async def test_reasoning_in_the_history_and_a_resumed_stage_reaches_the_model_unchanged() -> None:
    old_call = ToolCallSpec(id="call_old", name="current_time", arguments="{}")
    history: list[ChatMessage] = [
        UserMessage(content="What time is it?"),
        AssistantMessage(content="", tool_calls=[old_call], reasoning_content="look at the clock"),
        ToolMessage(tool_call_id="call_old", name="current_time", content='{"time": "09:00"}'),
        AssistantMessage(content="It is 9.", reasoning_content="say the time"),
    ]
    continuation: list[ChatMessage] = [
        AssistantMessage(content="", tool_calls=[TOOL_CALL], reasoning_content="add them"),
        ToolMessage(tool_call_id=TOOL_CALL.id, name="calculator", content='{"expression":"17 + 25","result":"42"}'),
    ]
    turn = TurnInput(
        system_prompt=SYSTEM_PROMPT,
        history=history,
        user_input="And 17 + 25?",
        ai_language="en",
        intent=NEEDS,
        intent_reasoning="needs the calculator",
        continuation=continuation,
    )
    model = FakeModel({"execution": [reply(EXECUTED)], "organization": [reply(ORGANIZED)]})

    outcome = await run(turn, model)

    assert answered(outcome).route == "NEEDS_EXECUTION"
    execution, organization = model.calls
    # A resumed turn: the intent answer is the one the stopped run decided, then the stage goes on.
    assert execution.messages == [
        {"role": "system", "content": SYSTEM_PROMPT},
        TURN("What time is it?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_old", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}
            ],
            "reasoning_content": "look at the clock",
        },
        {"role": "tool", "tool_call_id": "call_old", "content": '{"time": "09:00"}', "name": "current_time"},
        {"role": "assistant", "content": "It is 9.", "reasoning_content": "say the time"},
        TURN("And 17 + 25?"),
        {"role": "assistant", "content": NEEDS.model_dump_json(), "reasoning_content": "needs the calculator"},
        USER(EXECUTION_REQUEST),
        *tool_turns(TOOL_CALL, '{"expression":"17 + 25","result":"42"}', reasoning="add them"),
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

    await run(turn_for("What is 1 / 0 and 2 + 2?"), model, events, tools=with_calculator(calculator))

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
    assert calculator.finished == ["2 + 2", "1 / 0"]  # the two calls ran at the same time
    # Handed over by the tools themselves, before the model is called again, and in the order the model called.
    assert seen_by_the_follow_up == [[failed, worked]]
    assert events == [failed, worked]
    _, follow_up = calls_of(scripted, "execution")
    assert [m.get("tool_call_id") for m in follow_up.messages[-2:]] == ["call_a", "call_b"]


async def test_a_call_to_an_approval_tool_that_reaches_the_stage_is_refused_not_run() -> None:
    # The gateway stops the run at such a call (ToolCallsPending); a bug around it must not run the tool.
    call = ToolCallSpec(id="call_bio", name="update_bio", arguments='{"bio": "x"}')
    model = FakeModel(
        {
            "intent": [reply(NEEDS)],
            "execution": [ModelReply(tool_calls=[call]), reply(EXECUTED)],
            "organization": [reply(ORGANIZED)],
        }
    )
    events: list[StageToolResult] = []

    await run(turn_for(), model, events)

    content = json.dumps({"error": "update_bio runs only after the user approves it"})
    assert events == [
        StageToolResult(stage="execution", call_id="call_bio", name="update_bio", content=content, is_error=True)
    ]


async def test_a_turn_stopped_for_a_tool_the_run_may_not_run_is_suspended_with_its_intent() -> None:
    from agent_runtime.engine.flow.model_call import ToolCallsPending

    call = ToolCallSpec(id="call_bio", name="update_bio", arguments='{"bio": "x"}')

    async def model(request: ModelCall) -> ModelReply:
        if request.stage == "intent":
            return reply(NEEDS)
        raise ToolCallsPending(request.stage, [call])

    outcome = await run(turn_for(), model)

    assert outcome == TurnSuspended(
        route="NEEDS_EXECUTION",
        stage="execution",
        calls=[call],
        intent=NEEDS,
        intent_answer=reply(NEEDS).content,
        intent_reasoning=None,
    )
