"""Thinking mode across what DeepSeek's rules depend on: which stage thinks, which model answers, whether the requests
carry tools; over turns that call a tool, answer at once and go through the execution stage, then a 429 on flash in
the middle of a thinking tool loop that its fallback, deepseek-v4-pro, answers. The stub holds every request to its
strict rule (in thinking mode, every earlier assistant message of a request with tools carries the reasoning the
stub produced with it, a tool call's by its id), so a run finishes only if no request was refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from tests.conftest import User
from tests.runs.conftest import (
    SHORT_WINDOW,
    MakeHarness,
    crewai_config,
    execution_done,
    intent_direct,
    intent_needs,
    long_session,
    organized,
    stage_of,
    types,
)
from tests.stubs.deepseek_stub import RecordedRequest, StubFault, StubReply, StubToolCall

STAGES = ("intent", "execution", "organization")
THINKERS: dict[str, tuple[str, ...]] = {
    "none": (),
    "intent": ("intent",),
    "execution": ("execution",),
    "organization": ("organization",),
    "all": STAGES,
}
FLASH = "deepseek/deepseek-flash"
PRO = "deepseek/deepseek-v4-pro"


def _config(tmp_path: Path, thinkers: tuple[str, ...], model: str, *, tools: bool) -> Path:
    tasks = {s: {"thinking": "enabled" if s in thinkers else "disabled", "model": model} for s in STAGES}
    config = crewai_config(tmp_path, **tasks)
    if not tools:
        agents_file = config / "agents.yaml"
        agents = yaml.safe_load(agents_file.read_text(encoding="utf-8"))
        agents["execution"]["tools"] = []
        agents_file.write_text(yaml.safe_dump(agents, allow_unicode=True), encoding="utf-8")
    return config


def _calculator(turn: int) -> StubReply:
    call = StubToolCall(id=f"call_{turn}", name="calculator", arguments=json.dumps({"expression": f"{turn} + 1"}))
    return StubReply(tool_calls=[call])


def _turns(*, tools: bool) -> list[list[StubReply]]:
    """A tool turn (or, without tools, an execution that calls none), a direct answer, and the first again."""
    executed = [execution_done("0 + 1", {"result": "1"}), organized("It is 1.")]
    first = [intent_needs("Compute 0 + 1."), *([_calculator(0)] if tools else []), *executed]
    return [
        first,
        [intent_direct("Hello!")],
        [
            intent_needs("Compute 2 + 1."),
            *([_calculator(2)] if tools else []),
            execution_done("2 + 1", {"result": "3"}),
            organized("It is 3."),
        ],
    ]


def _reasonings(request: RecordedRequest) -> list[str | None]:
    return [m.get("reasoning_content") for m in request.messages if m.get("role") == "assistant"]


@pytest.mark.parametrize("model", [FLASH, PRO], ids=["flash", "v4-pro"])
@pytest.mark.parametrize("tools", [True, False], ids=["tools", "no-tools"])
@pytest.mark.parametrize("thinkers", list(THINKERS), ids=list(THINKERS))
async def test_no_request_is_refused_whichever_stage_thinks_on_either_model_with_or_without_tools(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path, thinkers: str, tools: bool, model: str
) -> None:
    config = _config(tmp_path, THINKERS[thinkers], model, tools=tools)
    async with make_harness(crewai_config_dir=config) as h:
        user = make_user()
        sid = await h.new_session(user)
        turns = _turns(tools=tools)
        for number, replies in enumerate(turns):
            h.stub.enqueue(*replies)
            result = await h.run(user, sid, f"turn {number}")
            assert types(result.events)[-1] == "RUN_FINISHED", result.body

        requests = h.stub.requests
        assert len(requests) == sum(len(replies) for replies in turns)
        assert {r.body["model"] for r in requests} == {model.removeprefix("deepseek/")}
        assert all(bool(r.body.get("tools")) == tools for r in requests)
        for request in requests:
            thinking = stage_of(request) in THINKERS[thinkers]
            assert request.body["thinking"] == {"type": "enabled" if thinking else "disabled"}
            # A reply that came with reasoning goes back with it; LiteLLM's placeholder only where there was none.
            if not THINKERS[thinkers]:
                assert _reasonings(request) == [None] * len(_reasonings(request))


async def test_a_429_on_flash_in_a_thinking_tool_loop_goes_to_v4_pro_with_the_loops_reasoning(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    config = _config(tmp_path, STAGES, FLASH, tools=True)
    async with make_harness(crewai_config_dir=config, llm_overload_wait_seconds=0.0) as h:
        user = make_user()
        sid = await h.new_session(user)
        busy = StubFault(kind="status", status=429, message="Rate Limit Reached")
        h.stub.enqueue(intent_needs("Compute 0 + 1."), _calculator(0), busy, *_turns(tools=True)[0][2:])
        result = await h.run(user, sid, "what is 0 + 1?")
        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        h.stub.enqueue(*_turns(tools=True)[2])
        result = await h.run(user, sid, "and 2 + 1?")
        assert types(result.events)[-1] == "RUN_FINISHED", result.body

        requests = h.stub.requests
        models = [(stage_of(r), r.body["model"]) for r in requests]
        assert models[:5] == [
            ("intent", "deepseek-flash"),
            ("execution", "deepseek-flash"),
            ("execution", "deepseek-flash"),  # refused with 429
            ("execution", "deepseek-v4-pro"),
            ("organization", "deepseek-flash"),
        ]
        intent_reasoning, call_reasoning = _reasonings(requests[1])[0], _reasonings(requests[2])[1]
        assert intent_reasoning and call_reasoning and " " not in (intent_reasoning.strip(), call_reasoning.strip())
        # v4-pro got the loop so far as flash did, reasoning and all.
        assert requests[3].messages == requests[2].messages
        assert requests[3].body["thinking"] == {"type": "enabled"}
        # The next turn's calls pass back every earlier reply's own reasoning, v4-pro's answer's included.
        later = requests[-1]
        assert None not in _reasonings(later) and " " not in _reasonings(later)


async def test_a_turn_resumed_after_an_approval_sends_the_intent_answer_with_its_reasoning(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    config = _config(tmp_path, STAGES, PRO, tools=True)
    async with make_harness(crewai_config_dir=config) as h:
        user = make_user()
        sid = await h.new_session(user)
        turn = [{"id": "u-1", "role": "user", "content": "set my bio to kayaking"}]
        agui = {"threadId": sid, "runId": "r", "messages": turn, "state": {}, "tools": [], "context": []}
        bio = StubToolCall(id="call_bio", name="update_bio", arguments='{"bio": "Kayaker"}')
        h.stub.enqueue(intent_needs("Set the user's bio."), StubReply(tool_calls=[bio]))
        result = await h.agui(user, agui)
        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker"}), organized("Your bio is updated."))
        resume = [{"interruptId": "approve-call_bio", "status": "resolved"}]
        result = await h.agui(user, {**agui, "runId": "r2", "resume": resume})
        assert types(result.events)[-1] == "RUN_FINISHED", result.body

        stopped, resumed = h.stub.requests[1], h.stub.requests[2]
        # The resumed call sends the stopped run's intent answer as it did, its reasoning included.
        assert resumed.messages[: len(stopped.messages)] == stopped.messages
        intent_answer = stopped.messages[-2]
        assert intent_answer["role"] == "assistant" and intent_answer["reasoning_content"].startswith("Thinking")


async def test_a_thinking_summary_repaired_sends_its_rejected_answer_back_with_its_reasoning(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    config = crewai_config(tmp_path, memory_summary={"thinking": "enabled"})
    async with make_harness(crewai_config_dir=config, **SHORT_WINDOW) as h:
        user = make_user()
        sid = await long_session(h, user)  # its next run cuts the window and summarises what it drops
        summary = StubReply(content=json.dumps({"summary": "The user asked fifteen questions."}))
        h.stub.enqueue(StubReply(content="not JSON"), summary, intent_direct("Hello!"))
        result = await h.run(user, sid, "hi")
        assert types(result.events)[-1] == "RUN_FINISHED", result.body

        rejected, repaired = h.stub.requests[0], h.stub.requests[1]
        assert rejected.body["tools"] and rejected.body["thinking"] == {"type": "enabled"}
        thought = f"Thinking (high effort) about: {rejected.messages[-1]['content'][:80]}"
        blanked = " " * len("not JSON")  # JSON mode blanks what is not JSON
        rejected_answer = {"role": "assistant", "content": blanked, "reasoning_content": thought}
        assert repaired.messages[len(rejected.messages)] == rejected_answer
