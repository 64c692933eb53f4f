"""A client reconnecting to a thread (a hydrate, docs/api.md "Reconnecting to a thread"): an AG-UI input with
nothing new gets the thread as it is (messages, state, what it waits for) or joins its live run; no model call,
nothing stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    RunResult,
    client_messages,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    sse_frames,
    text_messages,
    types,
)
from tests.runs.test_runs_statements import counted_statements
from tests.stubs.deepseek_stub import StubReply, StubToolCall
from tests.support.errors import error_body

CALL_ID = "call_bio_1"
INTERRUPT_ID = f"approve-{CALL_ID}"
CONFETTI = {
    "name": "show_confetti",
    "description": "Celebrate on the user's screen.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}


def agui_input(thread_id: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": str(uuid4()),
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }


def user_message(message_id: str, content: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": content}


def data_frames(body: str) -> list[dict[str, Any]]:
    """A hydrate made by the server (no run behind it): `data:` frames only, no ids (nothing to resume)."""
    assert body.endswith("\n\n"), body[-200:]
    events = []
    for frame in body[:-2].split("\n\n"):
        assert frame.startswith("data: ") and "\n" not in frame, frame
        events.append(json.loads(frame[len("data: ") :]))
    return events


async def hydrate(h: Harness, user: User, payload: dict[str, Any], **headers: str) -> tuple[int, str]:
    response = await h.client.post("/v1/agui", headers={**user.headers, **headers}, json=payload)
    return response.status_code, response.text


async def _runs(h: Harness, user: User, thread_id: str) -> list[dict[str, Any]]:
    response = await h.client.get(f"/v1/sessions/{thread_id}/runs", headers=user.headers)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _snapshot(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (snapshot,) = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"][-1:]
    messages: list[dict[str, Any]] = snapshot["messages"]
    return messages


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param("ends-with-the-reply", id="ends-with-the-reply"),
        pytest.param("empty", id="no-messages"),
        # Up to the last user message would be a regeneration; the flag says otherwise.
        pytest.param("flag", id="forwarded-props-hydrate"),
    ],
)
async def test_hydrate_of_a_finished_thread_is_its_messages_state_and_end(
    h: Harness, make_user: Callable[[], User], shape: str
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hi from AG-UI!"))
    first = await h.agui(user, agui_input(thread_id, [user_message("u-1", "hello")], state={"draft": "kept"}))
    assert types(first.events)[-1] == "RUN_FINISHED", first.body
    (reply_id,) = text_messages(first.events)
    held = client_messages(first.events, [user_message("u-1", "hello")])
    messages = {"ends-with-the-reply": held, "empty": [], "flag": held[:1]}[shape]
    extra = {"forwardedProps": {"hydrate": True}} if shape == "flag" else {}
    payload = agui_input(thread_id, messages, state={"draft": "not stored by a hydrate"}, **extra)
    rows, runs = await h.rows(user, thread_id), await _runs(h, user, thread_id)

    status, body = await hydrate(h, user, payload)

    assert status == 200, body
    assert data_frames(body) == [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": payload["runId"], "protocolVersion": "1.0"},
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [
                {"id": "u-1", "role": "user", "content": "hello"},
                {"id": reply_id, "role": "assistant", "content": "Hi from AG-UI!"},
            ],
        },
        {
            "type": "STATE_SNAPSHOT",
            "snapshot": {
                "draft": "kept",
                "agentRuntime": {
                    "runId": first.run_id,
                    "status": "completed",
                    "stage": None,
                    "route": None,
                    "pendingToolCallIds": [],
                    "interrupts": [],
                },
            },
        },
        {"type": "RUN_FINISHED", "threadId": thread_id, "runId": payload["runId"]},
    ]
    assert len(h.stub.requests) == 1
    assert await h.rows(user, thread_id) == rows
    assert await _runs(h, user, thread_id) == runs
    assert (await h.session(user, thread_id))["status"] == "completed"


async def test_hydrate_of_a_thread_that_never_ran_stores_nothing(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    payload = {**agui_input(thread_id, []), "runId": "client-run-1"}

    status, body = await hydrate(h, user, payload)

    assert status == 200, body
    events = data_frames(body)
    run_id = events[0]["runId"]
    assert run_id != "client-run-1"  # not a UUID: the hydrate names itself, as a run would
    assert events == [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id, "protocolVersion": "1.0"},
        {"type": "MESSAGES_SNAPSHOT", "messages": []},
        {"type": "STATE_SNAPSHOT", "snapshot": {}},
        {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id},
    ]
    assert await h.rows(user, thread_id) == []
    assert await _runs(h, user, thread_id) == []
    assert (await h.session(user, thread_id))["status"] == "pending"
    assert h.stub.requests == []


async def test_hydrate_of_a_thread_waiting_for_an_approval_sends_the_interrupt_again_and_resume_works(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Set the user's bio."),
        StubReply(tool_calls=[StubToolCall(id=CALL_ID, name="update_bio", arguments='{"bio": "Kayaker"}')]),
    )
    first = await h.agui(user, agui_input(thread_id, [user_message("u-1", "set my bio to kayaking")]))
    suspended = first.events[-1]
    assert suspended["outcome"]["type"] == "interrupt", first.body
    calls = len(h.stub.requests)

    payload = agui_input(thread_id, client_messages(first.events, [user_message("u-1", "set my bio to kayaking")]))
    status, body = await hydrate(h, user, payload)

    assert status == 200, body
    events = data_frames(body)
    assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    # The same outcome as the suspended run's RUN_FINISHED (its usage aside: nothing was billed).
    assert events[-1] == {
        "type": "RUN_FINISHED",
        "threadId": thread_id,
        "runId": payload["runId"],
        "outcome": suspended["outcome"],
    }
    # The thread as the client held it after the suspended run: the tool call waits in it.
    assert _snapshot(events) == payload["messages"]
    assert [c["id"] for c in payload["messages"][-1]["toolCalls"]] == [CALL_ID]
    assert events[2]["snapshot"] == {
        "agentRuntime": {
            "runId": first.run_id,
            "status": "interrupted",
            "stage": None,
            "route": None,
            "pendingToolCallIds": [],
            "interrupts": [INTERRUPT_ID],
        }
    }
    assert len(h.stub.requests) == calls

    h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker"}), organized("Your bio is updated."))
    resume = [{"interruptId": INTERRUPT_ID, "status": "resolved"}]
    resumed = await h.agui(user, agui_input(thread_id, _snapshot(events), resume=resume))

    assert types(resumed.events)[-1] == "RUN_FINISHED" and "outcome" not in resumed.events[-1], resumed.body
    assert list(text_messages(resumed.events).values()) == ["Your bio is updated."]
    profile = (await h.client.get("/v1/profile", headers=user.headers)).json()
    assert profile["bio"] == "Kayaker"


@pytest.mark.parametrize(
    ("declared", "finished"),
    [
        pytest.param({"protocolVersion": "1.0"}, {"outcome": {"type": "success", "pendingToolCallIds": ["call_fe_1"]}}),
        # A pre-1.0 client (CopilotKit 1.74) got the calls in `result` (agui/mapper.py): so it does again.
        pytest.param({}, {"result": {"pendingToolCallIds": ["call_fe_1"]}}, id="legacy"),
    ],
)
async def test_hydrate_of_a_thread_waiting_for_a_frontend_tool_names_the_call_again(
    h: Harness, make_user: Callable[[], User], declared: dict[str, Any], finished: dict[str, Any]
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Celebrate."),
        StubReply(tool_calls=[StubToolCall(id="call_fe_1", name="show_confetti", arguments='{"color": "gold"}')]),
    )
    first = await h.agui(
        user, {**agui_input(thread_id, [user_message("u-1", "celebrate!")], tools=[CONFETTI]), **declared}
    )
    suspended = {k: v for k, v in first.events[-1].items() if k not in ("runId", "usage")}
    assert suspended == {"type": "RUN_FINISHED", "threadId": thread_id, **finished}, first.body

    payload = {**agui_input(thread_id, []), **declared}
    status, body = await hydrate(h, user, payload)

    assert status == 200, body
    events = data_frames(body)
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": thread_id, "runId": payload["runId"], **finished}
    assert events[2]["snapshot"]["agentRuntime"]["status"] == "completed"
    assert events[2]["snapshot"]["agentRuntime"]["pendingToolCallIds"] == ["call_fe_1"]
    assert len(h.stub.requests) == 2


async def test_a_hydrate_is_two_reads(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hi."))
    assert types((await h.agui(user, agui_input(thread_id, [user_message("u-1", "hello")]))).events)[-1] == (
        "RUN_FINISHED"
    )
    await h.engine.runs.wait_idle()

    with counted_statements(monkeypatch, thread_id) as statements:
        status, body = await hydrate(h, user, agui_input(thread_id, []))
    assert status == 200, body
    # The thread (pending turn, state, latest run) and the MESSAGES_SNAPSHOT: nothing written.
    assert statements == ["thread", "snapshot"]


async def test_hydrate_during_a_run_joins_it_and_sees_its_remaining_events(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    hold = h.stub.hold_replies()
    h.stub.enqueue(intent_direct("Joined from another tab."))
    run = asyncio.create_task(h.agui(user, agui_input(thread_id, [user_message("u-1", "hello")])))
    async with asyncio.timeout(30):
        await h.stub.wait_for_requests(1)
    # The run's user message is stored: resending the thread up to it would be a regeneration, but one of the
    # turn being answered cannot run, so it joins the run (as an empty input does).
    joins = [
        asyncio.create_task(hydrate(h, user, agui_input(thread_id, [user_message("u-1", "hello")]))),
        asyncio.create_task(hydrate(h, user, agui_input(thread_id, []))),
    ]
    running = [r for r in await _runs(h, user, thread_id) if r["status"] == "running"]
    assert len(running) == 1
    run_id = running[0]["id"]

    def joining_after(last_event_id: str) -> asyncio.Task[tuple[int, str]]:
        payload = agui_input(thread_id, [])
        return asyncio.create_task(hydrate(h, user, payload, **{"Last-Event-ID": last_event_id}))

    after_third, earlier_run, past_the_end = [
        joining_after(f"{run_id}:3"),
        joining_after(f"{uuid4()}:40"),  # the client's last id is of an earlier run: it has seen none of this one
        joining_after(f"{run_id}:999"),
    ]
    await asyncio.sleep(0.2)  # every follower is waiting on the run
    assert not any(t.done() for t in [*joins, after_third, earlier_run, past_the_end])
    await hold.release()

    async with asyncio.timeout(30):
        original: RunResult = await run
        assert types(original.events)[-1] == "RUN_FINISHED", original.body
        frames = sse_frames(original.body)
        for join in [*joins, earlier_run]:
            status, body = await join
            assert status == 200, body
            assert sse_frames(body) == frames
        status, body = await after_third
        assert status == 200, body
        assert sse_frames(body) == frames[3:]
        # Past the run's last event: nothing, and the stream ends with the run.
        assert await past_the_end == (200, "")
    assert len(h.stub.requests) == 1
    assert len(await _runs(h, user, thread_id)) == 1


async def test_hydrate_of_another_users_thread_answers_like_a_missing_one(
    h: Harness, make_user: Callable[[], User]
) -> None:
    owner, intruder = make_user(), make_user()
    thread_id = await h.new_session(owner)
    h.stub.enqueue(intent_direct("Private."))
    assert types((await h.agui(owner, agui_input(thread_id, [user_message("u-1", "secret")]))).events)[-1] == (
        "RUN_FINISHED"
    )
    missing = str(uuid4())

    foreign = await h.client.post("/v1/agui", headers=intruder.headers, json=agui_input(thread_id, []))
    unknown = await h.client.post("/v1/agui", headers=intruder.headers, json=agui_input(missing, []))

    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json() == error_body(foreign, "not_found", f"session {thread_id} not found", [])
    assert unknown.json() == error_body(unknown, "not_found", f"session {missing} not found", [])
    assert len(h.stub.requests) == 1


@pytest.mark.parametrize(
    ("messages", "props"),
    [
        pytest.param([user_message("u-2", "new")], {"hydrate": True}, id="with-a-new-message"),
        pytest.param([], {"hydrate": True, "regenerate": True}, id="with-regenerate"),
    ],
)
async def test_the_hydrate_flag_takes_no_new_input(
    h: Harness, make_user: Callable[[], User], messages: list[dict[str, Any]], props: dict[str, Any]
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)

    response = await h.client.post(
        "/v1/agui", headers=user.headers, json=agui_input(thread_id, messages, forwardedProps=props)
    )

    assert (response.status_code, response.json()) == (
        422,
        error_body(
            response,
            "validation_error",
            "a hydrate takes no new input",
            [
                {
                    "loc": ["body", "forwardedProps", "hydrate"],
                    "msg": "not allowed with new user messages, tool results, resume entries or `regenerate`",
                    "type": None,
                }
            ],
        ),
    )
    assert await h.rows(user, thread_id) == []
    assert h.stub.requests == []
