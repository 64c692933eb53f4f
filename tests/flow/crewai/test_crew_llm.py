"""DelegatingLLM: CrewAI's calling convention in, our ModelCall/ModelReply out, never a json_schema format.

CrewAI is imported once per test process, offline (crewai_env); the import itself takes ~10 s of CPU, so
these tests cost that once at collection and are fast afterwards.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent_runtime.engine.flow.crewai import env as crewai_env

# CrewAI must be configured offline before it is imported; its storage then stays for the process.
_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-tests-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

from agent_runtime.engine.conversation.metadata import ToolCallSpec  # noqa: E402
from agent_runtime.engine.flow.crewai.llm import DelegatingLLM  # noqa: E402
from agent_runtime.engine.flow.crewai.wire import schema_instruction  # noqa: E402
from agent_runtime.engine.flow.model_call import (  # noqa: E402
    ModelCall,
    ModelReply,
    StageCancelledError,
    StageOutputError,
    StageToolResult,
)


class Answer(BaseModel):
    answer: str
    score: int


CallLog = list[ModelCall]


def scripted(*replies: ModelReply | Exception) -> tuple[Callable[[ModelCall], Awaitable[ModelReply]], CallLog]:
    """A call_model that answers with `replies` in order (the last one repeats) and records requests."""
    calls: CallLog = []

    async def call_model(request: ModelCall) -> ModelReply:
        calls.append(request)
        reply = replies[min(len(calls), len(replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply

    return call_model, calls


def llm_for(
    call_model: Callable[[ModelCall], Awaitable[ModelReply]],
    *,
    output_model: type[BaseModel] | None = None,
    events: list[StageToolResult] | None = None,
    max_json_retries: int = 2,
) -> DelegatingLLM:
    return DelegatingLLM.for_stage(
        call_model,
        stage="execution",
        model="deepseek/deepseek-flash",
        output_model=output_model,
        sink=events.append if events is not None else None,
        max_json_retries=max_json_retries,
    )


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
            "strict": True,
        },
    }
]


async def test_sync_call_from_a_worker_thread_runs_call_model_on_the_loop() -> None:
    loop = asyncio.get_running_loop()
    seen: list[tuple[asyncio.AbstractEventLoop, int]] = []

    async def call_model(request: ModelCall) -> ModelReply:
        seen.append((asyncio.get_running_loop(), threading.get_ident()))
        return ModelReply(content="plain text")

    llm = llm_for(call_model)
    messages = [
        {"role": "system", "content": "sys", "cache_breakpoint": True},
        {"role": "user", "content": "hi", "files": {}},
    ]
    result = await asyncio.to_thread(llm.call, messages)

    assert result == "plain text"
    assert seen == [(loop, threading.get_ident())]


async def test_messages_are_forwarded_without_crewai_private_keys() -> None:
    call_model, calls = scripted(ModelReply(content="ok"))
    llm = llm_for(call_model)
    messages = [
        {"role": "system", "content": "sys", "cache_breakpoint": True},
        {"role": "user", "content": "hi", "files": {}},
        {"role": "assistant", "content": None, "tool_calls": [], "raw_tool_call_parts": ["x"]},
    ]
    await asyncio.to_thread(llm.call, messages)

    assert calls[0].messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    assert calls[0].stage == "execution"
    assert calls[0].json_mode is False
    assert calls[0].tools is None


async def test_a_string_prompt_is_one_user_message() -> None:
    call_model, calls = scripted(ModelReply(content="ok"))
    assert await asyncio.to_thread(llm_for(call_model).call, "hello") == "ok"
    assert calls[0].messages == [{"role": "user", "content": "hello"}]


async def test_tool_calls_go_back_to_crewai_in_openai_shape_and_are_observed_with_their_ids() -> None:
    events: list[StageToolResult] = []
    call_model, calls = scripted(
        ModelReply(tool_calls=[ToolCallSpec(id="call_7", name="calculator", arguments='{"expression":"1+1"}')]),
        ModelReply(content='{"answer": "2", "score": 1}'),
    )
    llm = llm_for(call_model, output_model=Answer, events=events)
    request = [{"role": "user", "content": "1+1?"}]

    first = await asyncio.to_thread(llm.call, request, TOOLS, None, None)

    assert first == [
        {"id": "call_7", "type": "function", "function": {"name": "calculator", "arguments": '{"expression":"1+1"}'}}
    ]
    assert calls[0].tools is not None
    assert "strict" not in calls[0].tools[0]["function"]
    assert calls[0].tools[0]["function"]["name"] == "calculator"
    assert events == []  # the run emits the call from the reply; only its result is observed here

    # What CrewAI's executor sends next: the assistant tool-call turn and the tool's result.
    follow_up = [
        *request,
        {"role": "assistant", "content": None, "tool_calls": first},
        {"role": "tool", "tool_call_id": "call_7", "name": "calculator", "content": '{"result":"2"}'},
    ]
    final = await asyncio.to_thread(llm.call, follow_up, TOOLS, None, None)

    # A tool stage's final answer is validated here and goes back as JSON text (response_model was None).
    assert json.loads(final) == {"answer": "2", "score": 1}
    assert events == [
        StageToolResult(
            stage="execution", call_id="call_7", name="calculator", content='{"result":"2"}', is_error=False
        )
    ]
    # Reported once, even though later calls carry the same tool turn again.
    llm.tool_calls.observe(follow_up)
    assert len(events) == 1


async def test_tool_turns_from_the_history_are_not_reported() -> None:
    events: list[StageToolResult] = []
    call_model, _ = scripted(ModelReply(content="ok"))
    history = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "old_1", "type": "function", "function": {}}]},
        {"role": "tool", "tool_call_id": "old_1", "content": "from an earlier run"},
        {"role": "user", "content": "and now?"},
    ]
    await asyncio.to_thread(llm_for(call_model, events=events).call, history)
    assert events == []


async def test_response_model_gets_the_parsed_model_json_mode_and_no_json_schema_format() -> None:
    call_model, calls = scripted(ModelReply(content='{"answer": "yes", "score": 3}'))
    llm = llm_for(call_model)

    result = await asyncio.to_thread(
        llm.call,
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "Q"}],
        None,
        None,
        None,
        None,
        None,
        Answer,
    )

    assert result == Answer(answer="yes", score=3)
    request = calls[0]
    assert request.json_mode is True
    # The request model has no response_format at all: our LLM layer can only send json_object.
    assert set(ModelCall.model_fields) == {
        "messages",
        "tools",
        "json_mode",
        "stage",
        "attempt",
        "max_tokens",
        "allow_tools",
    }
    assert "response_format" not in json.dumps(request.model_dump())
    # The schema is in the prompt, appended to the request (last user message); the system message is untouched.
    assert request.messages[0] == {"role": "system", "content": "sys"}
    assert request.messages[-1]["content"] == f"Q\n\n{schema_instruction(Answer)}"


async def test_schema_is_not_added_twice_or_when_the_prompt_has_it() -> None:
    call_model, calls = scripted(ModelReply(content='{"answer": "yes", "score": 3}'))
    llm = DelegatingLLM.for_stage(call_model, stage="intent", model="m", output_model=Answer, inject_schema=False)
    await asyncio.to_thread(llm.call, [{"role": "user", "content": "Q with its own schema"}])
    assert calls[0].messages == [{"role": "user", "content": "Q with its own schema"}]
    assert calls[0].json_mode is True


async def test_invalid_json_is_repaired_with_a_bounded_retry() -> None:
    call_model, calls = scripted(
        ModelReply(content="Sure! Here it is: {answer: yes}"),
        ModelReply(content='```json\n{"answer": "yes", "score": 3}\n```'),
    )
    llm = llm_for(call_model)

    result = await llm.acall([{"role": "user", "content": "Q"}], response_model=Answer)

    assert result == Answer(answer="yes", score=3)
    assert [(c.attempt, c.allow_tools) for c in calls] == [(0, True), (1, False)]
    assert calls[1].messages == [
        *calls[0].messages,
        {"role": "assistant", "content": "Sure! Here it is: {answer: yes}"},
        {
            "role": "user",
            "content": "Your previous answer could not be used: (root): Invalid JSON: expected value at line 1 "
            "column 1. Answer again with only the Answer JSON object (the schema titled Answer in my request).",
        },
    ]


async def test_invalid_json_forever_raises_a_clear_error_after_the_retries() -> None:
    call_model, calls = scripted(ModelReply(content='{"answer": "yes"}'))
    llm = llm_for(call_model, max_json_retries=2)

    with pytest.raises(StageOutputError, match=r"did not match Answer after 3 attempts") as raised:
        await asyncio.to_thread(llm.call, [{"role": "user", "content": "Q"}], None, None, None, None, None, Answer)

    assert len(calls) == 3
    assert raised.value.extra == {"stage": "execution", "attempts": 3}
    assert raised.value.status_code == 502


CALL_7 = ToolCallSpec(id="call_7", name="calculator", arguments='{"expression":"1+1"}')
RESULT_7 = {"role": "tool", "tool_call_id": "call_7", "name": "calculator", "content": '{"result":"2"}'}
ANSWER_JSON = '{"answer": "2", "score": 1}'


def repair_text(problem: str) -> str:
    """The repair turn of a stage whose schema is in the system prompt (inject_schema=False, as in the flow)."""
    return (
        f"Your previous answer could not be used: {problem}. "
        "Answer again with only the Answer JSON object (the schema titled Answer in the system prompt)."
    )


def stage_llm(call_model: Callable[[ModelCall], Awaitable[ModelReply]], **kwargs: Any) -> DelegatingLLM:
    return DelegatingLLM.for_stage(
        call_model, stage="execution", model="m", output_model=Answer, inject_schema=False, **kwargs
    )


async def test_prose_after_a_tool_result_is_repaired_in_a_call_that_allows_no_tools() -> None:
    call_model, calls = scripted(
        ModelReply(tool_calls=[CALL_7], finish_reason="tool_calls"),
        ModelReply(content="The answer is 2.", finish_reason="stop"),
        ModelReply(content=ANSWER_JSON, finish_reason="stop"),
    )

    llm = stage_llm(call_model)
    # As CrewAI's executor drives it: the request, then the tool call's turn and its result.
    request: list[dict[str, Any]] = [{"role": "user", "content": "1+1?"}]
    first = await asyncio.to_thread(llm.call, request, TOOLS)
    follow_up = [*request, {"role": "assistant", "content": None, "tool_calls": first}, RESULT_7]
    final = await asyncio.to_thread(llm.call, follow_up, TOOLS)

    assert json.loads(final) == {"answer": "2", "score": 1}
    assert [(c.attempt, c.allow_tools) for c in calls] == [(0, True), (0, True), (1, False)]
    # Still listed: the gateway sends them with tool_choice "none" (or leaves them out).
    offered = {key: value for key, value in TOOLS[0]["function"].items() if key != "strict"}
    assert calls[2].tools == calls[1].tools == [{"type": "function", "function": offered}]
    assert calls[2].messages == [
        *follow_up,
        {"role": "assistant", "content": "The answer is 2."},
        {"role": "user", "content": repair_text("(root): Invalid JSON: expected value at line 1 column 1")},
    ]


@pytest.mark.parametrize("then", ["answers", "calls again"])
async def test_tool_calls_in_a_repair_are_refused_never_run(then: str) -> None:
    events: list[StageToolResult] = []
    refused = ModelReply(tool_calls=[ToolCallSpec(id="call_8", name="calculator", arguments="{}")])
    call_model, calls = scripted(
        ModelReply(content="Let me think."),
        refused,
        ModelReply(content=ANSWER_JSON) if then == "answers" else refused,
    )
    llm = stage_llm(call_model, sink=events.append)
    request = [{"role": "user", "content": "Q"}]

    if then == "answers":
        assert json.loads(await asyncio.to_thread(llm.call, request, TOOLS)) == {"answer": "2", "score": 1}
    else:
        with pytest.raises(StageOutputError, match=r"did not match Answer after 3 attempts"):
            await asyncio.to_thread(llm.call, request, TOOLS)

    assert [c.allow_tools for c in calls] == [True, False, False]
    assert calls[2].messages == [
        *request,
        {"role": "assistant", "content": "Let me think."},
        {"role": "user", "content": repair_text("(root): Invalid JSON: expected value at line 1 column 1")},
        # The refused calls are not in the transcript: they would need results.
        {"role": "assistant", "content": ""},
        {"role": "user", "content": repair_text("it called calculator, but no tool can be called in this answer")},
    ]
    # Never handed over, so never reported either (a tool turn with that id is not this stage's).
    llm.tool_calls.observe([{"role": "tool", "tool_call_id": "call_8", "content": "x"}])
    await asyncio.sleep(0)
    assert events == []


async def test_tool_calls_where_no_tools_were_offered_are_refused() -> None:
    call_model, calls = scripted(
        ModelReply(content="", tool_calls=[CALL_7, ToolCallSpec(id="call_9", name="current_time", arguments="{}")]),
        ModelReply(content=ANSWER_JSON),
    )

    result = await asyncio.to_thread(stage_llm(call_model).call, "Q", None, None, None, None, None, Answer)

    assert result == Answer(answer="2", score=1)
    assert [(c.tools, c.allow_tools) for c in calls] == [(None, True), (None, False)]
    assert calls[1].messages[-1] == {
        "role": "user",
        "content": repair_text("it called calculator, current_time, but no tool can be called in this answer"),
    }


CUT = "it was cut off at the output limit, so the JSON is incomplete; keep the answer shorter"


@pytest.mark.parametrize(
    ("content", "finish_reason", "problem"),
    [
        ("  \n  ", "stop", "it was blank"),
        ("", None, "it was blank"),
        ('{"answer": "a long', "length", CUT),
        # A thinking model can spend the whole budget on its reasoning.
        (None, "length", CUT),
    ],
    ids=["blank", "empty", "cut", "empty-at-limit"],
)
async def test_blank_and_cut_answers_are_repaired_saying_what_happened(
    content: str | None, finish_reason: str | None, problem: str
) -> None:
    call_model, calls = scripted(
        ModelReply(content=content, finish_reason=finish_reason), ModelReply(content=ANSWER_JSON)
    )

    result = await asyncio.to_thread(stage_llm(call_model).call, "Q", TOOLS)

    assert json.loads(result) == {"answer": "2", "score": 1}
    assert calls[1].messages == [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": content or ""},
        {"role": "user", "content": repair_text(problem)},
    ]


async def test_a_complete_answer_that_hit_the_output_limit_is_used() -> None:
    # DeepSeek's JSON mode can pad a finished object with whitespace up to max_tokens.
    call_model, calls = scripted(ModelReply(content=ANSWER_JSON + "\n" * 40, finish_reason="length"))
    assert json.loads(await asyncio.to_thread(stage_llm(call_model).call, "Q")) == {"answer": "2", "score": 1}
    assert len(calls) == 1


@pytest.mark.parametrize("arguments", ["[1, 2]", "42", "true"])
async def test_tool_arguments_crewai_cannot_take_end_the_stage_as_invalid_model_output(arguments: str) -> None:
    call_model, calls = scripted(ModelReply(tool_calls=[ToolCallSpec(id="c1", name="calculator", arguments=arguments)]))

    with pytest.raises(StageOutputError) as raised:
        await asyncio.to_thread(stage_llm(call_model).call, "Q", TOOLS)

    assert (
        raised.value.message
        == "stage 'execution': the model called calculator with arguments that are not a JSON object"
    )
    assert raised.value.extra == {"stage": "execution"}
    assert raised.value.code == "invalid_model_output"
    assert len(calls) == 1


async def test_reasoning_goes_back_on_the_stage_tool_call_turns_only() -> None:
    call_model, calls = scripted(
        ModelReply(tool_calls=[CALL_7], reasoning="need the calculator"),
        ModelReply(content="The answer is 2.", reasoning="easy"),
        ModelReply(content=ANSWER_JSON, reasoning="as JSON then"),
    )
    history_turn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "old_1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}],
        "reasoning_content": "from an earlier turn",
    }
    llm = stage_llm(call_model)
    request = [
        history_turn,
        {"role": "tool", "tool_call_id": "old_1", "content": "1"},
        {"role": "user", "content": "Q"},
    ]
    first = await asyncio.to_thread(llm.call, request, TOOLS)
    # CrewAI rebuilds the tool-call turn from what it was handed: no reasoning.
    rebuilt = {"role": "assistant", "content": None, "tool_calls": first}
    await asyncio.to_thread(llm.call, [*request, rebuilt, RESULT_7], TOOLS)

    assert calls[0].messages == request
    restored = {**rebuilt, "reasoning_content": "need the calculator"}
    assert calls[1].messages == [*request, restored, RESULT_7]
    # The rejected answer's reasoning ("easy") is not sent back.
    assert calls[2].messages == [
        *request,
        restored,
        RESULT_7,
        {"role": "assistant", "content": "The answer is 2."},
        {"role": "user", "content": repair_text("(root): Invalid JSON: expected value at line 1 column 1")},
    ]
    # CrewAI hands the stage's messages over again and again: what is there is never replaced.
    kept = {**rebuilt, "reasoning_content": "as sent"}
    await asyncio.to_thread(llm.call, [kept, RESULT_7], TOOLS)
    assert calls[3].messages == [kept, RESULT_7]


async def test_crewai_does_not_add_its_own_rate_limit_retries() -> None:
    # Our LLM layer retries; CrewAI's wrapper would retry again with time.sleep on a worker thread.
    call_model, calls = scripted(RuntimeError("429 rate limit exceeded"))
    with pytest.raises(RuntimeError, match="rate limit"):
        await asyncio.to_thread(llm_for(call_model).call, "hi")
    assert len(calls) == 1


async def test_call_on_the_loop_thread_fails_instead_of_deadlocking() -> None:
    call_model, calls = scripted(ModelReply(content="ok"))
    with pytest.raises(RuntimeError, match="deadlock"):
        llm_for(call_model).call("hi")
    assert calls == []


async def test_llm_side_tool_execution_is_refused() -> None:
    call_model, calls = scripted(ModelReply(content="ok"))
    with pytest.raises(NotImplementedError, match="planning"):
        await asyncio.to_thread(llm_for(call_model).call, "hi", TOOLS, None, {"calculator": print})
    assert calls == []


async def test_close_cancels_the_call_in_flight_and_refuses_new_ones() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def call_model(request: ModelCall) -> ModelReply:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ModelReply(content="too late")

    llm = llm_for(call_model)
    worker = asyncio.create_task(asyncio.to_thread(llm.call, "hi"))
    await asyncio.wait_for(started.wait(), 2)
    llm.close()

    with pytest.raises(StageCancelledError):
        await asyncio.wait_for(worker, 2)
    assert cancelled.is_set()
    with pytest.raises(StageCancelledError):
        await asyncio.to_thread(llm.call, "again")


async def test_errors_of_call_model_reach_crewai_unchanged() -> None:
    class ProviderDown(Exception):
        pass

    call_model, _ = scripted(ProviderDown("503"))
    with pytest.raises(ProviderDown):
        await asyncio.to_thread(llm_for(call_model).call, "hi")


def test_crewai_is_set_up_offline_and_tuned() -> None:
    from crewai.agents.agent_executor import AgentExecutor
    from crewai.events.event_listener import event_listener
    from crewai.flow.runtime import FlowState
    from crewai_core.user_data import has_user_declined_tracing

    for name, value in crewai_env.OFFLINE_ENV.items():
        assert os.environ[name] == value
    assert Path(os.environ["CREWAI_STORAGE_DIR"]).is_absolute()
    assert has_user_declined_tracing()
    assert event_listener.formatter.verbose is False
    # Without this every Agent kickoff defines a new pydantic model class (see crewai_env).
    assert issubclass(AgentExecutor._initial_state_t, FlowState)


def test_modules_refuse_to_load_crewai_without_the_offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREWAI_DISABLE_TELEMETRY")
    with pytest.raises(crewai_env.CrewAIEnvError, match="load_crewai"):
        crewai_env.require_crewai_env()


def test_the_first_storage_dir_stays_once_crewai_is_imported(tmp_path: Path) -> None:
    before = os.environ[crewai_env.STORAGE_ENV]
    assert crewai_env.configure_crewai_env(tmp_path) == Path(before)
    assert os.environ[crewai_env.STORAGE_ENV] == before
    assert not (tmp_path / crewai_env.STORAGE_SUBDIR).exists()


def test_importing_the_adapter_module_does_not_import_crewai() -> None:
    # The run service imports ModelCall & co. on the app's import path; CrewAI (~10 s) must stay lazy.
    code = (
        "import sys\n"
        "import agent_runtime.engine.flow.crewai.llm as m\n"
        "from agent_runtime.engine.flow.crewai.env import CrewAIEnvError\n"
        "assert 'crewai' not in sys.modules\n"
        "try:\n    m.DelegatingLLM\nexcept CrewAIEnvError:\n    print('refused')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREWAI_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"


async def test_acall_from_another_loop_still_runs_call_model_on_ours() -> None:
    loop = asyncio.get_running_loop()
    seen: list[asyncio.AbstractEventLoop] = []

    async def call_model(request: ModelCall) -> ModelReply:
        seen.append(asyncio.get_running_loop())
        return ModelReply(content='{"answer": "a", "score": 1}')

    llm = llm_for(call_model)
    # The flow may run on a private loop in a worker thread (crew_flow's default runner).
    result = await asyncio.to_thread(asyncio.run, llm.acall("hi", response_model=Answer))
    assert result == Answer(answer="a", score=1)
    assert seen == [loop]


async def test_close_also_cancels_an_acall_in_flight() -> None:
    started = asyncio.Event()

    async def call_model(request: ModelCall) -> ModelReply:
        started.set()
        await asyncio.sleep(60)
        return ModelReply(content="too late")

    llm = llm_for(call_model)
    pending = asyncio.create_task(llm.acall("hi"))
    await asyncio.wait_for(started.wait(), 2)
    llm.close()
    with pytest.raises(StageCancelledError):
        await asyncio.wait_for(pending, 2)


async def test_results_observed_from_another_thread_reach_the_sink_on_the_loop() -> None:
    loop_thread = threading.get_ident()
    delivered: list[tuple[StageToolResult, int]] = []
    call_model, _ = scripted(ModelReply(tool_calls=[ToolCallSpec(id="call_9", name="calculator", arguments="{}")]))
    llm = DelegatingLLM.for_stage(
        call_model, stage="execution", model="m", sink=lambda event: delivered.append((event, threading.get_ident()))
    )
    await asyncio.to_thread(llm.call, "go", TOOLS)

    # e.g. a result_as_answer tool ended the loop: the flow reports the transcript from its own thread.
    transcript = [{"role": "tool", "tool_call_id": "call_9", "name": "calculator", "content": "done"}]
    await asyncio.to_thread(llm.tool_calls.stage_ended, transcript)
    await asyncio.sleep(0)

    assert delivered == [
        (
            StageToolResult(stage="execution", call_id="call_9", name="calculator", content="done", is_error=False),
            loop_thread,
        )
    ]
