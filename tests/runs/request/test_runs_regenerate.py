"""Regeneration (issue 23): the last user turn answered again. The old reply (its tool calls and results too)
leaves the visible thread, MESSAGES_SNAPSHOT and the model's history, and stays readable as audit
(`?superseded=true`) and billed; a refused request stores nothing."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tests.conftest import User
from tests.runs.conftest import (
    INTENT_CONTRACT_LINE,
    Harness,
    RunResult,
    client_messages,
    cny_cost,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    run_cost,
    text_messages,
    types,
    usage,
)
from tests.stubs.deepseek_stub import StubFault, StubReply, StubToolCall
from tests.support.errors import error_body

CALCULATOR = StubToolCall(id="call_calc_1", name="calculator", arguments='{"expression": "6*7"}')
BIO = StubToolCall(id="call_bio_1", name="update_bio", arguments='{"bio": "Kayaker"}')
CONFETTI = {
    "name": "show_confetti",
    "description": "Celebrate on the user's screen.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}


def agui_input(thread_id: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": "r", "messages": messages, "state": {}, "tools": [], "context": [], **extra}


def user_message(message_id: str, content: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": content}


async def regenerate(h: Harness, user: User, sid: str) -> RunResult:
    return await h.run_body(user, sid, {"regenerate": True})


async def superseded(h: Harness, user: User, sid: str) -> list[dict[str, Any]]:
    response = await h.client.get(f"/v1/sessions/{sid}/messages?superseded=true", headers=user.headers)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def brief(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(m["seq"], m["role"], m["metadata"]["kind"], m["content"]) for m in items]


async def session_usage(h: Harness, user: User, sid: str) -> dict[str, Any]:
    response = await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)
    assert response.status_code == 200, response.text
    total: dict[str, Any] = response.json()["total"]
    return total


async def test_regenerate_after_a_plain_turn_replaces_the_visible_reply_and_bills_both(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("First answer."))
    first = await h.run(user, sid, "hello")
    (old_id,) = text_messages(first.events)

    h.stub.enqueue(intent_direct("Second answer."))
    again = await regenerate(h, user, sid)

    assert again.status == 200, again.body
    assert types(again.events)[-1] == "RUN_FINISHED"
    # The stream starts with the thread as it is now: the user's message, its old reply gone.
    (snapshot,) = again.of_type("MESSAGES_SNAPSHOT")
    visible = await h.visible(user, sid)
    assert snapshot["messages"] == [{"id": visible[0]["message_id"], "role": "user", "content": "hello"}]
    (new_id,) = text_messages(again.events)
    assert list(text_messages(again.events).values()) == ["Second answer."]
    assert brief(visible) == [
        (1, "user", "user_input", "hello"),
        (3, "assistant", "assistant_output", "Second answer."),
    ]
    assert visible[1]["message_id"] == new_id
    old = await superseded(h, user, sid)
    assert brief(old) == [(2, "assistant", "assistant_output", "First answer.")]
    assert old[0]["message_id"] == old_id
    # The model was asked exactly what it was asked the first time (the provider's cached prefix, whole).
    assert len(h.stub.requests) == 2
    assert h.stub.requests[1].messages == h.stub.requests[0].messages
    # Both replies are billed.
    costs = [run_cost(first.events), run_cost(again.events)]
    total = await session_usage(h, user, sid)
    assert Decimal(total["cost"]) == sum(Decimal(c["cost"]) for c in costs) > 0
    assert (total["input_tokens"], total["output_tokens"], total["model_calls"]) == (
        sum(c["inputTokens"] for c in costs),
        sum(c["outputTokens"] for c in costs),
        2,
    )
    runs = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()
    assert [r["status"] for r in runs["items"]] == ["completed", "completed"]
    assert runs["items"][0]["id"] == again.run_id


async def test_a_regenerated_tool_turn_hides_its_calls_from_the_thread_and_from_the_next_turn(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute 6*7."),
        StubReply(tool_calls=[CALCULATOR]),
        execution_done("42", {"result": 42}),
        organized("It is 42."),
    )
    first = await h.run(user, sid, "what is 6*7?")
    assert types(first.events)[-1] == "RUN_FINISHED"

    h.stub.enqueue(intent_direct("Six times seven is forty-two."))
    again = await regenerate(h, user, sid)
    assert types(again.events)[-1] == "RUN_FINISHED", again.body
    assert h.stub.requests[4].messages == h.stub.requests[0].messages

    assert brief(await h.visible(user, sid)) == [
        (1, "user", "user_input", "what is 6*7?"),
        (5, "assistant", "assistant_output", "Six times seven is forty-two."),
    ]
    assert [(m["seq"], m["role"], m["metadata"]["kind"]) for m in await superseded(h, user, sid)] == [
        (2, "assistant", "tool_call"),
        (3, "tool", "tool_result"),
        (4, "assistant", "assistant_output"),
    ]

    h.stub.enqueue(intent_direct("You're welcome."))
    after = await h.run(user, sid, "thanks")
    assert types(after.events)[-1] == "RUN_FINISHED"
    (snapshot,) = after.of_type("MESSAGES_SNAPSHOT")
    assert [(m["role"], m.get("content")) for m in snapshot["messages"]] == [
        ("user", "what is 6*7?"),
        ("assistant", "Six times seven is forty-two."),
        ("user", "thanks"),
    ]
    # The next turn's history holds the new reply only: no old tool call, result or answer.
    assert h.stub.requests[-1].messages[1:-1] == [
        {"role": "user", "content": "what is 6*7?" + INTENT_CONTRACT_LINE},
        {"role": "assistant", "content": "Six times seven is forty-two."},
    ]
    assert len(await h.visible(user, sid)) == 4
    total = await session_usage(h, user, sid)
    assert total["model_calls"] == 6


async def test_agui_regenerate_is_the_thread_truncated_at_the_user_message(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hi from AG-UI!"))
    first = await h.agui(user, agui_input(sid, [user_message("u-1", "hello agui")]))
    (old_id,) = text_messages(first.events)

    # The client dropped the reply and sends the thread up to the user message it answered.
    h.stub.enqueue(intent_direct("Hello again!"))
    again = await h.agui(user, agui_input(sid, [user_message("u-1", "hello agui")]))

    assert again.status == 200, again.body
    assert types(again.events)[-1] == "RUN_FINISHED"
    (snapshot,) = again.of_type("MESSAGES_SNAPSHOT")
    assert snapshot["messages"] == [user_message("u-1", "hello agui")]
    (new_id,) = text_messages(again.events)
    assert client_messages(again.events, [user_message("u-1", "hello agui")]) == [
        user_message("u-1", "hello agui"),
        {"id": new_id, "role": "assistant", "content": "Hello again!"},
    ]
    assert not again.of_type("CUSTOM") or all(e["name"] != "input_ignored" for e in again.of_type("CUSTOM"))
    assert [(m["message_id"], m["content"]) for m in await superseded(h, user, sid)] == [(old_id, "Hi from AG-UI!")]

    # Explicitly, whatever the messages: `forwardedProps.regenerate`.
    h.stub.enqueue(intent_direct("Third time."))
    third = await h.agui(user, agui_input(sid, [], forwardedProps={"regenerate": True}))
    assert types(third.events)[-1] == "RUN_FINISHED", third.body
    (snapshot,) = third.of_type("MESSAGES_SNAPSHOT")
    assert snapshot["messages"] == [user_message("u-1", "hello agui")]
    assert [(m["role"], m["content"]) for m in await h.visible(user, sid)] == [
        ("user", "hello agui"),
        ("assistant", "Third time."),
    ]
    assert [m["content"] for m in await superseded(h, user, sid)] == ["Hi from AG-UI!", "Hello again!"]
    (third_id,) = text_messages(third.events)

    # The next turn's snapshot is the thread with the last reply only.
    h.stub.enqueue(intent_direct("Bye!"))
    reply = {"id": third_id, "role": "assistant", "content": "Third time."}
    after = await h.agui(user, agui_input(sid, [user_message("u-1", "hello agui"), reply, user_message("u-2", "bye")]))
    assert types(after.events)[-1] == "RUN_FINISHED", after.body
    (snapshot,) = after.of_type("MESSAGES_SNAPSHOT")
    assert snapshot["messages"] == [user_message("u-1", "hello agui"), reply, user_message("u-2", "bye")]

    # The flag with something new to run on is a contradiction.
    rows = await h.rows(user, sid)
    mixed = await h.client.post(
        "/v1/agui",
        headers=user.headers,
        json=agui_input(sid, [user_message("u-3", "new")], forwardedProps={"regenerate": True}),
    )
    assert (mixed.status_code, mixed.json()) == (
        422,
        error_body(
            mixed,
            "validation_error",
            "a regeneration takes no new input",
            [
                {
                    "loc": ["body", "forwardedProps", "regenerate"],
                    "msg": "not allowed with new user messages, tool results or resume entries",
                    "type": None,
                }
            ],
        ),
    )
    assert await h.rows(user, sid) == rows


async def test_regenerate_is_refused_while_the_last_turn_waits_for_an_approval(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_needs("Set the user's bio."), StubReply(tool_calls=[BIO]))
    first = await h.agui(user, agui_input(sid, [user_message("u-1", "set my bio")]))
    assert first.events[-1]["outcome"]["type"] == "interrupt", first.body
    rows, calls = await h.rows(user, sid), len(h.stub.requests)

    rest = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"regenerate": True})
    agui = await h.client.post("/v1/agui", headers=user.headers, json=agui_input(sid, [user_message("u-1", "x")]))

    for response in (rest, agui):
        assert (response.status_code, response.json()) == (
            409,
            error_body(
                response,
                "regenerate_pending",
                "the last turn waits for approvals or tool results: answer them, or send a new message",
                [{"loc": ["body", "regenerate"], "msg": "pending: call_bio_1", "type": None}],
            ),
        )
    assert await h.rows(user, sid) == rows
    assert await superseded(h, user, sid) == []
    assert len(h.stub.requests) == calls
    assert (await h.session(user, sid))["status"] == "completed"


async def test_regenerate_is_refused_while_a_frontend_tool_call_waits(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Celebrate."),
        StubReply(tool_calls=[StubToolCall(id="call_fe_1", name="show_confetti", arguments='{"color": "gold"}')]),
    )
    body = {**agui_input(sid, [user_message("u-1", "celebrate!")]), "tools": [CONFETTI], "protocolVersion": "1.0"}
    first = await h.agui(user, body)
    assert first.events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["call_fe_1"]}, first.body
    rows = await h.rows(user, sid)

    response = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"regenerate": True})

    assert (response.status_code, response.json()["error"]["code"]) == (409, "regenerate_pending")
    assert response.json()["error"]["details"] == [
        {"loc": ["body", "regenerate"], "msg": "pending: call_fe_1", "type": None}
    ]
    assert await h.rows(user, sid) == rows
    assert len(h.stub.requests) == 2


async def test_nothing_to_regenerate_on_a_thread_without_a_user_message(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)

    rest = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"regenerate": True})
    agui = await h.client.post(
        "/v1/agui", headers=user.headers, json=agui_input(sid, [], forwardedProps={"regenerate": True})
    )

    for response in (rest, agui):
        assert (response.status_code, response.json()) == (
            409,
            error_body(
                response,
                "nothing_to_regenerate",
                "nothing to regenerate",
                [{"loc": ["body", "regenerate"], "msg": "the thread has no user message yet", "type": None}],
            ),
        )
    assert await h.rows(user, sid) == []
    assert (await h.session(user, sid))["status"] == "pending"
    assert h.stub.requests == []


async def test_regenerate_takes_no_new_input(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("First answer."))
    await h.run(user, sid, "hello")
    rows = await h.rows(user, sid)

    for field, value in (("message", "hi"), ("resume", [{"interrupt_id": "x", "status": "resolved"}])):
        response = await h.client.post(
            f"/v1/sessions/{sid}/runs", headers=user.headers, json={"regenerate": True, field: value}
        )
        assert (response.status_code, response.json()) == (
            422,
            error_body(
                response,
                "validation_error",
                "a regeneration takes no new input",
                [{"loc": ["body", field], "msg": "not allowed with `regenerate`", "type": None}],
            ),
        )
    assert await h.rows(user, sid) == rows
    assert len(h.stub.requests) == 1


async def test_another_users_session_cannot_be_regenerated(h: Harness, make_user: Callable[[], User]) -> None:
    owner, intruder = make_user(), make_user()
    sid = await h.new_session(owner)
    h.stub.enqueue(intent_direct("First answer."))
    await h.run(owner, sid, "hello")
    rows = await h.rows(owner, sid)

    rest = await h.client.post(f"/v1/sessions/{sid}/runs", headers=intruder.headers, json={"regenerate": True})
    agui = await h.client.post(
        "/v1/agui", headers=intruder.headers, json=agui_input(sid, [], forwardedProps={"regenerate": True})
    )
    audit = await h.client.get(f"/v1/sessions/{sid}/messages?superseded=true", headers=intruder.headers)

    for response in (rest, agui, audit):
        assert (response.status_code, response.json()) == (
            404,
            error_body(response, "not_found", f"session {sid} not found"),
        )
    assert await h.rows(owner, sid) == rows
    assert len(h.stub.requests) == 1


async def test_a_failed_regeneration_leaves_no_visible_reply_and_can_be_regenerated_again(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("First answer."))
    await h.run(user, sid, "hello")

    # Beyond the retries and the fallback (llm_max_retries = 2): the run fails.
    h.stub.enqueue(*[StubFault(kind="status", status=503)] * 6)
    failed = await regenerate(h, user, sid)
    assert types(failed.events)[-1] == "RUN_ERROR", failed.body
    assert failed.events[-1]["code"] == "llm_unavailable"
    assert brief(await h.visible(user, sid)) == [(1, "user", "user_input", "hello")]
    assert brief(await superseded(h, user, sid)) == [(2, "assistant", "assistant_output", "First answer.")]
    assert (await h.session(user, sid))["status"] == "failed"

    h.stub.enqueue(intent_direct("Second answer."))
    again = await regenerate(h, user, sid)
    assert types(again.events)[-1] == "RUN_FINISHED", again.body
    assert brief(await h.visible(user, sid)) == [
        (1, "user", "user_input", "hello"),
        (3, "assistant", "assistant_output", "Second answer."),
    ]
    assert brief(await superseded(h, user, sid)) == [(2, "assistant", "assistant_output", "First answer.")]


async def test_a_regeneration_that_calls_a_tool_bills_every_call_of_it(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("About 40."))
    first = await h.run(user, sid, "what is 6*7?")

    h.stub.enqueue(
        intent_needs("Compute 6*7.", usage=usage(900, 40, 800)),
        StubReply(tool_calls=[CALCULATOR], usage=usage(1200, 20, 900)),
        execution_done("42", {"result": 42}, usage=usage(1300, 60, 1200)),
        organized("It is 42.", usage=usage(1100, 30, 1000)),
    )
    again = await regenerate(h, user, sid)
    assert types(again.events)[-1] == "RUN_FINISHED", again.body

    assert [(m["seq"], m["role"], m["metadata"]["kind"]) for m in await h.visible(user, sid)] == [
        (1, "user", "user_input"),
        (3, "assistant", "tool_call"),
        (4, "tool", "tool_result"),
        (5, "assistant", "assistant_output"),
    ]
    assert brief(await superseded(h, user, sid)) == [(2, "assistant", "assistant_output", "About 40.")]
    # The run's first row is its tool call (it stored no input row): its cost is the run's too.
    cost = run_cost(again.events)
    expected = sum(cny_cost(*u) for u in ((900, 40, 800), (1200, 20, 900), (1300, 60, 1200), (1100, 30, 1000)))
    assert (Decimal(cost["cost"]), cost["modelCalls"], cost["inputTokens"]) == (expected, 4, 4500)
    total = await session_usage(h, user, sid)
    assert Decimal(total["cost"]) == expected + Decimal(run_cost(first.events)["cost"])
    assert total["model_calls"] == 5


async def test_a_resent_agui_request_is_refused_not_regenerated(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    run_id = "5d0c2a4e-7b1f-4c3e-9a8d-2f6e1b0c9a77"
    h.stub.enqueue(intent_direct("The only answer."))
    request = {**agui_input(sid, [user_message("u-1", "hello")]), "runId": run_id}
    first = await h.agui(user, request)
    assert types(first.events)[-1] == "RUN_FINISHED", first.body
    rows = await h.rows(user, sid)

    # The same request again (a lost stream, a proxy's retry): it would pay for an answer the client never saw.
    resent = await h.client.post("/v1/agui", headers=user.headers, json=request)
    assert (resent.status_code, resent.json()) == (
        409,
        error_body(
            resent,
            "run_id_taken",
            f"run {run_id} already ran on this thread: resume its events instead of resending it, or regenerate "
            "with a new runId",
            [{"loc": ["body", "runId"], "msg": "a run with this id exists", "type": None}],
        ),
    )
    assert await h.rows(user, sid) == rows
    assert await superseded(h, user, sid) == []
    assert len(h.stub.requests) == 1
