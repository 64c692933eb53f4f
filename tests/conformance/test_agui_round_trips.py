"""AG-UI round trips through the official client (`@ag-ui/client`'s HttpAgent) against the live demo server.

- Tool approval (AG-UI interrupts): "set my bio to: ..." makes the demo model call `update_bio`, which the
  YAML grants with `requires_approval: true`. The run ends with outcome `interrupt`; the client's next
  `runAgent({resume})` approves (as is, or with edited arguments) or denies; a second device that sends a
  new message instead declines it and its message runs. The profile changes only after an approval.
- A frontend tool: the client offers `show_confetti`, the model calls it, the run ends with
  `pendingToolCallIds`, and the client's tool message continues the turn.
- Every run of those passes the harness's checks (no client error or warning: state patches applied with
  validation on), its MESSAGES_SNAPSHOT is the stored thread, the client's messages end equal to the stored
  ones, and its state ends with the run's final `agentRuntime` and the client's own data kept.

All cases run at once, each on its own user and thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from tests.conformance.harness import (
    Case,
    ServeProcess,
    Servers,
    _client_view,
    _stored_view,
    assert_accepted,
    assert_messages_match,
    legacy_schema_rejections,
    new_case,
    run_client,
    stored_messages,
)

from agent_runtime.settings import Settings

BIO_REQUEST = "set my bio to: Kayaker from Lofoten"
CONFETTI = {
    "name": "show_confetti",
    "description": "Show confetti on the user's screen.",
    "parameters": {"type": "object", "properties": {}},
}
CLIENT_STATE = {"theme": "dark"}

PLANS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "approve": (BIO_REQUEST, [{}, {"resume": {"status": "resolved"}}]),
    "edit": (BIO_REQUEST, [{}, {"resume": {"status": "resolved", "payload": {"arguments": {"bio": "Edited bio"}}}}]),
    "deny": (BIO_REQUEST, [{}, {"resume": {"status": "cancelled"}}]),
    "ignore": (
        BIO_REQUEST,
        [{}, {"newAgent": True, "addMessages": [{"id": "second-device", "role": "user", "content": "hello?"}]}],
    ),
    "frontend": (
        "please use the show_confetti tool",
        [{"tools": [CONFETTI]}, {"tools": [CONFETTI], "answerPendingTools": '{"shown": true}'}],
    ),
    # As CopilotKit 1.74 does it (its bundled @ag-ui/core 0.0.59 declares no protocolVersion): the tool's
    # result goes with the next user message, and an approval resolves with `{"approved": true}`.
    "frontend-legacy": (
        "please use the show_confetti tool",
        [
            {"tools": [CONFETTI]},
            {
                "tools": [CONFETTI],
                "answerPendingTools": '{"shown": true}',
                "addMessages": [{"id": "after-confetti", "role": "user", "content": "thanks!"}],
            },
        ],
    ),
    "approve-legacy": (BIO_REQUEST, [{}, {"resume": {"status": "resolved", "payload": {"approved": True}}}]),
}
LEGACY = {"frontend-legacy", "approve-legacy"}


@dataclass
class Trip:
    server: ServeProcess
    case: Case
    task: asyncio.Task[dict[str, Any]]

    async def runs(self) -> list[dict[str, Any]]:
        summary = await self.task
        runs: list[dict[str, Any]] = summary["runs"]
        return runs


@pytest.fixture(scope="module")
async def trips(servers: Servers, settings: Settings) -> AsyncIterator[dict[str, Trip]]:
    started: dict[str, Trip] = {}
    for name, (text, steps) in PLANS.items():
        case = await new_case(servers.demo, settings)
        legacy = {"legacyClient": True} if name in LEGACY else {}
        run = run_client(servers.demo, case, text, steps=steps, state=CLIENT_STATE, **legacy)
        started[name] = Trip(servers.demo, case, asyncio.create_task(run, name=f"agui-{name}"))
    yield started
    for trip in started.values():
        trip.task.cancel()
    await asyncio.gather(*(t.task for t in started.values()), return_exceptions=True)


async def _bio(trip: Trip) -> str | None:
    async with httpx.AsyncClient(base_url=trip.server.base_url, headers=trip.case.headers, timeout=10) as client:
        bio: str | None = (await client.get("/v1/profile")).json()["bio"]
    return bio


def _agent_runtime(run: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = run["state"]
    assert state["theme"] == "dark", state  # the client's own data survives every STATE_SNAPSHOT
    runtime: dict[str, Any] = state["agentRuntime"]
    return runtime


async def _assert_snapshot_is_the_stored_thread(trip: Trip, run: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """The run's MESSAGES_SNAPSHOT (second event) is the thread as stored when the run started."""
    snapshot = events[1]
    assert snapshot["type"] == "MESSAGES_SNAPSHOT", [e["type"] for e in events]
    stored = [_stored_view(m) for m in await stored_messages(trip.server, trip.case)]
    theirs = [_client_view(m) for m in snapshot["messages"]]
    assert theirs == stored[: len(theirs)], (theirs, stored)


def _interrupted(run: dict[str, Any]) -> dict[str, Any]:
    """The first run of an approval case: stopped at update_bio with one interrupt; returns the interrupt."""
    events = assert_accepted(run, terminal="RUN_FINISHED")
    (finished,) = run["runFinished"]
    assert finished["outcome"] == "interrupt", finished
    (interrupt,) = finished["interrupts"]
    starts = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert [(e["toolCallName"], e["toolCallId"]) for e in starts] == [("update_bio", interrupt["toolCallId"])]
    assert not [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert interrupt["id"] == f"approve-{interrupt['toolCallId']}" and interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"] == {"toolName": "update_bio", "arguments": {"bio": "Kayaker from Lofoten"}}
    assert run["pendingInterrupts"] == [interrupt]
    assert _agent_runtime(run) == {
        "runId": events[0]["runId"],
        "status": "interrupted",
        "stage": None,
        "route": "NEEDS_EXECUTION",
        "pendingToolCallIds": [],
        "interrupts": [interrupt["id"]],
    }
    return interrupt


async def _resumed(trip: Trip, run: dict[str, Any], interrupt: dict[str, Any]) -> str:
    """The resuming run of an approval case; returns the tool result's content."""
    events = assert_accepted(run, terminal="RUN_FINISHED")
    assert run["http"]["requestBody"]["resume"][0]["interruptId"] == interrupt["id"]
    (finished,) = run["runFinished"]
    assert finished["outcome"] == "success" and run["pendingInterrupts"] == [], finished
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["toolCallId"]
    assert [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"], "the turn went on to an answer"
    assert _agent_runtime(run)["status"] == "completed"
    await _assert_snapshot_is_the_stored_thread(trip, run, events)
    messages = await assert_messages_match(trip.server, trip.case, run)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"], messages
    content: str = result["content"]
    return content


async def test_an_approved_tool_call_runs_once_after_the_approval(trips: dict[str, Trip]) -> None:
    trip = trips["approve"]
    first, second = await trip.runs()
    interrupt = _interrupted(first)
    content = await _resumed(trip, second, interrupt)
    assert json.loads(content) == {"bio": "Kayaker from Lofoten", "updated": True}
    assert await _bio(trip) == "Kayaker from Lofoten"


async def test_an_approval_with_edited_arguments_runs_the_tool_with_them(trips: dict[str, Trip]) -> None:
    trip = trips["edit"]
    first, second = await trip.runs()
    interrupt = _interrupted(first)
    content = await _resumed(trip, second, interrupt)
    assert json.loads(content) == {
        "arguments_edited_by_user": {"bio": "Edited bio"},
        "result": {"bio": "Edited bio", "updated": True},
    }
    assert await _bio(trip) == "Edited bio"


async def test_a_denied_tool_call_never_runs(trips: dict[str, Trip]) -> None:
    trip = trips["deny"]
    first, second = await trip.runs()
    interrupt = _interrupted(first)
    content = await _resumed(trip, second, interrupt)
    assert json.loads(content) == {"error": "denied by the user"}
    assert await _bio(trip) is None


async def test_a_new_message_instead_of_the_answer_declines_the_call_and_runs(trips: dict[str, Trip]) -> None:
    trip = trips["ignore"]
    first, second = await trip.runs()
    _interrupted(first)
    # The second device's new message, without resume: the call is closed as not approved, the message runs
    # (a thread never refuses every message).
    assert_accepted(second, terminal="RUN_FINISHED")
    stored = await stored_messages(trip.server, trip.case)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "user", "assistant"], stored
    assert json.loads(stored[2]["content"]) == {"error": "not approved: the user sent a new message instead"}
    assert await _bio(trip) is None


async def test_a_frontend_tool_round_trip(trips: dict[str, Trip]) -> None:
    trip = trips["frontend"]
    first, second = await trip.runs()

    events = assert_accepted(first, terminal="RUN_FINISHED")
    (finished,) = first["runFinished"]
    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "show_confetti"
    assert finished["outcome"] == "success" and finished["pendingToolCallIds"] == [start["toolCallId"]]
    assert first["http"]["requestBody"]["tools"] == [CONFETTI]
    assert _agent_runtime(first)["pendingToolCallIds"] == [start["toolCallId"]]

    events = assert_accepted(second, terminal="RUN_FINISHED")
    sent = second["http"]["requestBody"]["messages"]
    assert sent[-1] == {
        "id": f"tool-result-{start['toolCallId']}",
        "role": "tool",
        "toolCallId": start["toolCallId"],
        "content": '{"shown": true}',
    }
    assert second["runFinished"][0]["pendingToolCallIds"] == []
    assert [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"], "the turn went on to an answer"
    assert _agent_runtime(second)["status"] == "completed"
    await _assert_snapshot_is_the_stored_thread(trip, second, events)
    messages = await assert_messages_match(trip.server, trip.case, second)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"], messages
    assert messages[2]["id"] == f"tool-result-{start['toolCallId']}"


async def test_a_client_before_1_0_runs_the_frontend_tool_and_moves_on_with_its_result(
    trips: dict[str, Trip],
) -> None:
    trip = trips["frontend-legacy"]
    first, second = await trip.runs()

    events = assert_accepted(first, terminal="RUN_FINISHED")
    assert "protocolVersion" not in first["http"]["requestBody"]
    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    # No outcome (0.0.59's success outcome refuses pendingToolCallIds): the client derives the call from the
    # stream, and `result` names it for readers of the raw event.
    assert "outcome" not in events[-1] and events[-1]["result"] == {"pendingToolCallIds": [start["toolCallId"]]}
    assert first["runFinished"][0]["pendingToolCallIds"] == [start["toolCallId"]]
    assert await legacy_schema_rejections(events) == []

    events = assert_accepted(second, terminal="RUN_FINISHED")
    assert [m["role"] for m in second["http"]["requestBody"]["messages"]][-2:] == ["tool", "user"]
    assert await legacy_schema_rejections(events) == []
    messages = await assert_messages_match(trip.server, trip.case, second)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"], messages
    assert messages[2]["content"] == '{"shown": true}'


async def test_a_client_before_1_0_approves_with_copilotkits_payload(trips: dict[str, Trip]) -> None:
    trip = trips["approve-legacy"]
    first, second = await trip.runs()
    for run in (first, second):
        assert await legacy_schema_rejections(assert_accepted(run, terminal="RUN_FINISHED")) == []
    assert await _bio(trip) == "Kayaker from Lofoten"


async def test_a_1_0_client_gets_the_1_0_outcome_that_0_0_59_would_refuse(trips: dict[str, Trip]) -> None:
    # Why the RUN_FINISHED depends on the declared version: the 1.0 form fails the old schemas.
    first, _ = await trips["frontend"].runs()
    (rejected,) = await legacy_schema_rejections(first["raw"]["events"])
    assert rejected["type"] == "RUN_FINISHED", rejected
