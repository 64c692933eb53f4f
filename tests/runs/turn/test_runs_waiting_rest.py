"""A REST client sees what a turn waits for: the session and its runs list carry `waiting_for` (the approvals and
frontend tool calls, with the ids their answers name) while the turn waits, and null once it is answered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import User
from tests.runs.conftest import Harness, execution_done, intent_direct, intent_needs, organized, types
from tests.runs.turn.test_runs_frontend_tools import _waiting
from tests.stubs.deepseek_stub import StubReply, StubToolCall

BIO_ARGS = '{"bio": "Kayaker from Lofoten"}'


async def _views(h: Harness, user: User, sid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    session = (await h.client.get(f"/v1/sessions/{sid}", headers=user.headers)).json()
    listed = (await h.client.get("/v1/sessions", headers=user.headers)).json()["items"]
    assert [s for s in listed if s["id"] == sid] == [session]
    runs = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
    return session, runs


async def test_an_approval_is_seen_on_the_session_and_its_run_and_answered_from_there(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hello!"))
    first = await h.run(user, sid, "hi")
    h.stub.enqueue(
        intent_needs("Set the user's bio."),
        StubReply(tool_calls=[StubToolCall(id="call_bio_1", name="update_bio", arguments=BIO_ARGS)]),
    )
    asked = await h.run(user, sid, "set my bio to kayaking")
    assert asked.events[-1]["outcome"]["type"] == "interrupt", asked.events[-1]

    session, runs = await _views(h, user, sid)
    waiting = {
        "run_id": asked.run_id,
        "calls": [
            {
                "kind": "approval",
                "tool_call_id": "call_bio_1",
                "name": "update_bio",
                "arguments": BIO_ARGS,
                "interrupt_id": "approve-call_bio_1",
            }
        ],
    }
    assert (session["status"], session["waiting_for"]) == ("completed", waiting)
    assert [(r["id"], r["status"], r["waiting_for"]) for r in runs] == [
        (asked.run_id, "completed", waiting),
        (first.run_id, "completed", None),
    ]

    # What the session says is all the answer needs.
    h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker from Lofoten"}), organized("Done."))
    (call,) = session["waiting_for"]["calls"]
    answered = await h.run_body(user, sid, {"resume": [{"interrupt_id": call["interrupt_id"], "status": "resolved"}]})
    assert types(answered.events)[-1] == "RUN_FINISHED", answered.body

    session, runs = await _views(h, user, sid)
    assert session["waiting_for"] is None
    assert [(r["id"], r["waiting_for"]) for r in runs] == [
        (answered.run_id, None),
        (asked.run_id, None),
        (first.run_id, None),
    ]


async def test_a_frontend_tool_call_is_seen_and_answered_with_tool_results(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, events = await _waiting(h, user)
    run_id = events[0]["runId"]

    session, runs = await _views(h, user, sid)
    waiting = {
        "run_id": run_id,
        "calls": [
            {
                "kind": "frontend_tool",
                "tool_call_id": "call_fe_1",
                "name": "show_confetti",
                "arguments": '{"color": "gold"}',
                "interrupt_id": None,
            }
        ],
    }
    assert session["waiting_for"] == waiting
    assert [r["waiting_for"] for r in runs] == [waiting]

    h.stub.enqueue(execution_done("Confetti shown.", {"shown": True}), organized("Congratulations!"))
    (call,) = session["waiting_for"]["calls"]
    answered = await h.run_body(
        user, sid, {"tool_results": [{"tool_call_id": call["tool_call_id"], "content": '{"shown": true}'}]}
    )
    assert types(answered.events)[-1] == "RUN_FINISHED", answered.body
    session, runs = await _views(h, user, sid)
    assert session["waiting_for"] is None and [r["waiting_for"] for r in runs] == [None, None]


async def test_a_new_message_closes_what_the_turn_waited_for(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid, _ = await _waiting(h, user)
    h.stub.enqueue(intent_needs("Say hi."), execution_done("ok", {}), organized("Hi."))
    assert types((await h.run(user, sid, "never mind")).events)[-1] == "RUN_FINISHED"
    session, runs = await _views(h, user, sid)
    assert session["waiting_for"] is None and [r["waiting_for"] for r in runs] == [None, None]
