"""Tool failures inside a run: a tool result with an error (stored, streamed, shown to the model), never a crash."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.conftest import Harness, execution_done, intent_needs, organized, stage_of, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall

from agent_runtime.engine.flow.tools import RunToolSet, ToolOutcome


@pytest.mark.parametrize(
    ("arguments", "error_starts"),
    [
        ('{"expression": "1 / 0"}', "division by zero"),
        # The tool checks the arguments against its schema before it runs, and says what is wrong.
        ('{"formula": "1 + 1"}', "invalid arguments: expression: Field required; formula: Extra inputs are not"),
    ],
    ids=["tool-reports-an-error", "arguments-fail-the-schema"],
)
async def test_tool_error_becomes_an_error_result_and_the_run_completes(
    h: Harness, make_user: Callable[[], User], arguments: str, error_starts: str
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute it with the calculator."),
        StubReply(tool_calls=[StubToolCall(id="call_bad", name="calculator", arguments=arguments)]),
        execution_done("the calculator failed", {}),
        organized("I could not compute that."),
    )

    result = await h.run(user, sid, "compute it")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    assert [stage_of(r) for r in h.stub.requests] == ["intent", "execution", "execution", "organization"]
    (event,) = result.of_type("TOOL_CALL_RESULT")
    error = json.loads(event["content"])
    assert set(error) == {"error"} and error["error"].startswith(error_starts), error
    rows = {r.seq: r for r in await h.rows(user, sid)}
    tool_row = rows[3]
    assert (tool_row.role, tool_row.content, tool_row.message_id) == ("tool", event["content"], event["messageId"])
    metadata = tool_row.metadata.model_dump()
    assert (metadata["tool_call_id"], metadata["is_error"]) == ("call_bad", True)
    # The model saw the failure as the tool's result and carried on.
    tool_turns = [m for m in h.stub.requests[2].messages if m.get("role") == "tool"]
    assert [t["tool_call_id"] for t in tool_turns] == ["call_bad"]
    assert error["error"][:15] in tool_turns[0]["content"]
    assert (await h.session(user, sid))["status"] == "completed"


async def test_a_crash_around_the_tool_is_an_internal_error_result_without_its_text(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def crash(self: RunToolSet, name: str, args_json: str) -> ToolOutcome:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(RunToolSet, "run", crash)
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute it with the calculator."),
        StubReply(tool_calls=[StubToolCall(id="call_x", name="calculator", arguments='{"expression": "1 + 1"}')]),
        execution_done("the calculator failed", {}),
        organized("I could not compute that."),
    )

    result = await h.run(user, sid, "compute it")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    (event,) = result.of_type("TOOL_CALL_RESULT")
    assert json.loads(event["content"]) == {"error": "calculator failed with an internal error"}
    assert "secret internals" not in json.dumps([r.messages for r in h.stub.requests])
    tool_row = {r.seq: r for r in await h.rows(user, sid)}[3]
    assert (tool_row.content, tool_row.metadata.model_dump()["is_error"]) == (event["content"], True)
