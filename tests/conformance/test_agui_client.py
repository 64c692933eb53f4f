"""Conformance of our AG-UI streams with the official TypeScript client, `@ag-ui/client` (npm).

The real `agent-runtime serve` process runs against the test database; `agui_client.mjs` drives it with
the client's `HttpAgent` (its verifier rejects protocol violations) and reports what the client saw and
rebuilt. Three runs, all at once: a direct answer and a tool run (calculator) on one server, and a
failing run (the model endpoint refuses connections -> RUN_ERROR) on another. For each, the messages the
client rebuilt must equal the messages we stored for the thread; the failing run's session must read
`failed` over the HTTP API, with the error_id its RUN_ERROR event names.

Checked for every run: the client raised no error (its verifier throws on a protocol violation) and
printed no warning (it warns when it strips fields or drops events it does not know); every event on
the wire reached it; RUN_STARTED first, exactly one terminal event (RUN_FINISHED, or RUN_ERROR for the
failing run) and nothing after it; every TOOL_CALL_RESULT names a tool call started earlier.

Every TOOL_CALL_RESULT of a run that resumes a turn may also name a tool call its MESSAGES_SNAPSHOT carries.
The harness (installing the client, the servers, these checks) is harness.py; the round trips (approval,
frontend tools, snapshots, state) are test_agui_round_trips.py. ServeProcess logs and the client's full report
of each run are kept in the pytest temp directory `agui-conformance*` (the path is in every failure message).

The runs start as soon as the servers are ready, so the two on the demo server also wait together for its
CrewAI warm-up (`RunService.ensure_warm`, imports in a worker thread): concurrent first runs are covered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.conformance.harness import (
    ERROR_ID,
    Case,
    ServeProcess,
    Servers,
    _explain,
    assert_accepted,
    assert_messages_match,
    legacy_schema_rejections,
    new_case,
    run_client,
    stored_session,
)

from agent_runtime.settings import Settings

# --------------------------------------------------------------------------------------------------
# The cases: the three runs go concurrently (each on its own user and thread); each test checks one.


@dataclass
class Run:
    server: ServeProcess
    case: Case
    task: asyncio.Task[dict[str, Any]]

    async def summary(self) -> dict[str, Any]:
        return await self.task


@pytest.fixture(scope="module")
async def runs(servers: Servers, settings: Settings) -> AsyncIterator[dict[str, Run]]:
    plan = {
        "direct": (servers.demo, "hello"),  # demo model: answers directly, no tools
        "tool": (servers.demo, "what is 12*7?"),  # demo model: calls the calculator
        "failing": (servers.failing, "hello"),  # model endpoint refuses connections
    }
    started: dict[str, Run] = {}
    for name, (server, text) in plan.items():
        case = await new_case(server, settings)
        task = asyncio.create_task(run_client(server, case, text), name=f"agui-{name}")
        started[name] = Run(server, case, task)
    yield started
    for run in started.values():
        run.task.cancel()
    await asyncio.gather(*(r.task for r in started.values()), return_exceptions=True)


async def test_direct_run_conforms(runs: dict[str, Run]) -> None:
    run = runs["direct"]
    summary = await run.summary()
    events = assert_accepted(summary, terminal="RUN_FINISHED")
    types = [e["type"] for e in events]
    assert "TEXT_MESSAGE_CONTENT" in types and "TOOL_CALL_START" not in types, types
    # The demo model reasons first (as deepseek-reasoner does): the client keeps it as a reasoning message.
    assert types.index("REASONING_START") < types.index("TEXT_MESSAGE_START"), types
    reasoning = [m for m in summary["messages"] if m["role"] == "reasoning"]
    assert len(reasoning) == 1 and reasoning[0]["content"].startswith("[demo model] Reading the request"), reasoning
    messages = await assert_messages_match(run.server, run.case, summary)
    assert [m["role"] for m in messages] == ["user", "assistant"], messages
    assert messages[0]["id"] == run.case.user_message_id and messages[0]["content"] == "hello"
    assert messages[1]["content"].strip(), messages


async def test_tool_run_conforms(runs: dict[str, Run]) -> None:
    run = runs["tool"]
    summary = await run.summary()
    events = assert_accepted(summary, terminal="RUN_FINISHED")
    starts = [e for e in events if e["type"] == "TOOL_CALL_START"]
    results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert [e["toolCallName"] for e in starts] == ["calculator"], [e["type"] for e in events]
    assert [r["toolCallId"] for r in results] == [starts[0]["toolCallId"]]
    assert "84" in results[0]["content"], results
    messages = await assert_messages_match(run.server, run.case, summary)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"], messages
    assert messages[1]["toolCalls"][0][1] == "calculator" and messages[2]["toolCallId"] == starts[0]["toolCallId"]
    assert "84" in messages[-1]["content"], messages


async def test_failing_run_conforms(runs: dict[str, Run]) -> None:
    run = runs["failing"]
    summary = await run.summary()
    events = assert_accepted(summary, terminal="RUN_ERROR")
    error = events[-1]
    why = _explain(summary)
    assert error["message"] and error["code"], error
    assert summary["runErrors"][0] == error, why
    # A refused connection is a model-provider failure, not an unexpected one.
    assert error["code"] != "internal_error", f"RUN_ERROR {error}{why}"
    match = ERROR_ID.search(error["message"])
    assert match, f"RUN_ERROR names no error_id: {error}{why}"
    # The client keeps the user's message and has no half-built assistant message; we stored just that too.
    assert [(m["id"], m["role"]) for m in summary["messages"]] == [(run.case.user_message_id, "user")], summary[
        "messages"
    ]
    messages = await assert_messages_match(run.server, run.case, summary)
    assert messages[0]["content"] == "hello", messages
    # The session is recorded as failed (before RUN_ERROR is sent) under the error_id the event names.
    session = await stored_session(run.server, run.case)
    assert session["status"] == "failed" and session["error_id"] == match.group(1), f"session {session}{why}"
    snapshot = session["state_snapshot"]
    assert snapshot["status"] == "failed" and snapshot["error_id"] == match.group(1), f"session {session}{why}"
    assert snapshot["run_id"] == events[0]["runId"], f"session {session}{why}"


async def test_plain_streams_pass_the_schemas_of_the_client_copilotkit_bundles(runs: dict[str, Run]) -> None:
    # A success without pending calls, a tool run and a RUN_ERROR carry nothing @ag-ui/core 0.0.59 refuses,
    # whatever version the client declared (RUN_STARTED's protocolVersion passes its open base schema).
    for name in ("direct", "tool", "failing"):
        summary = await runs[name].summary()
        assert summary["raw"]["events"][0]["protocolVersion"] == "1.0", name
        assert await legacy_schema_rejections(summary["raw"]["events"]) == [], name
