"""Every model call carries its YAML task's `max_tokens` (issue 12: no call without an output cap): each stage's
calls (the tool loop and a JSON repair included) and the memory summary's, as the provider receives them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import User
from tests.runs.conftest import (
    SHORT_WINDOW,
    MakeHarness,
    crewai_config,
    execution_done,
    intent_needs,
    long_session,
    organized,
    stage_of,
    types,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

# Distinct per task, so a cap sent with the wrong stage's call fails the test.
# Distinct, so each request shows whose cap it carries; the summary's at least MEMORY_SUMMARY_MAX_TOKENS (400).
CAPS = {"intent": 301, "execution": 302, "organization": 303, "memory_summary": 404}


def _config_with_caps(tmp_path: Path) -> Path:
    return crewai_config(tmp_path, **{task: {"max_tokens": cap} for task, cap in CAPS.items()})


async def test_every_call_sends_its_tasks_max_tokens(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    async with make_harness(crewai_config_dir=_config_with_caps(tmp_path), **SHORT_WINDOW) as h:
        user = make_user()
        # A full window, so this run cuts it and summarises what it drops first.
        sid = await long_session(h, user)
        h.stub.enqueue(
            StubReply(content=json.dumps({"summary": "The user asked fifteen questions."})),
            intent_needs("Compute 17 + 25 with the calculator."),
            StubReply(tool_calls=[StubToolCall(id="call_1", name="calculator", arguments='{"expression": "17 + 25"}')]),
            execution_done("17 + 25 = 42", {"result": "42"}),
            StubReply(content="not JSON"),  # the organization stage's first answer is repaired
            organized("17 + 25 is 42."),
        )

        result = await h.run(user, sid, "What is 17 + 25?")

        assert types(result.events)[-1] == "RUN_FINISHED", result.events[-1]
        summary, *stages = h.stub.requests
        assert "ConversationSummary" in summary.messages[-1]["content"]
        assert summary.body["max_tokens"] == CAPS["memory_summary"]
        assert [(stage_of(r), r.body["max_tokens"]) for r in stages] == [
            ("intent", CAPS["intent"]),
            ("execution", CAPS["execution"]),
            ("execution", CAPS["execution"]),
            ("organization", CAPS["organization"]),
            ("organization", CAPS["organization"]),
        ]
