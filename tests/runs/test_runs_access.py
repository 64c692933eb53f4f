"""Who may start a run, and on what input: 401, 404 and 422 come back as JSON before any stream or model call."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from tests.conftest import User
from tests.runs.conftest import SHORT_WINDOW, Harness, MakeHarness, intent_direct, text_messages, types

from agent_runtime.engine.runs.request.models import MAX_MESSAGE_CHARS


def _agui(thread_id: str, content: str = "hello") -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "r-1",
        "messages": [{"id": str(uuid4()), "role": "user", "content": content}],
    }


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code
    return error


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-token"),
        pytest.param({"Authorization": "Bearer not-a-jwt"}, id="garbage-token"),
        pytest.param({"Authorization": "Basic dXNlcjpwYXNz"}, id="wrong-scheme"),
    ],
)
async def test_runs_need_a_valid_token(h: Harness, make_user: Callable[[], User], headers: dict[str, str]) -> None:
    owner = make_user()
    sid = await h.new_session(owner)

    rest = await h.client.post(f"/v1/sessions/{sid}/runs", headers=headers, json={"message": "hi"})
    agui = await h.client.post("/v1/agui", headers=headers, json=_agui(sid))

    _error(rest, 401, "unauthorized")
    _error(agui, 401, "unauthorized")
    assert await h.rows(owner, sid) == []
    assert (await h.session(owner, sid))["status"] == "pending"
    assert h.stub.requests == []


async def test_runs_on_another_users_session_are_404(h: Harness, make_user: Callable[[], User]) -> None:
    owner, intruder = make_user(), make_user()
    sid = await h.new_session(owner)

    rest = await h.client.post(f"/v1/sessions/{sid}/runs", headers=intruder.headers, json={"message": "hi"})
    agui = await h.client.post("/v1/agui", headers=intruder.headers, json=_agui(sid))
    missing = await h.client.post(f"/v1/sessions/{uuid4()}/runs", headers=owner.headers, json={"message": "hi"})

    for response in (rest, agui):
        assert _error(response, 404, "not_found")["message"] == f"session {sid} not found"
    _error(missing, 404, "not_found")
    assert await h.rows(owner, sid) == []
    assert (await h.session(owner, sid))["status"] == "pending"
    assert h.stub.requests == []


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        pytest.param({"message": ""}, ["body", "message"], id="empty"),
        pytest.param({"message": "x" * (MAX_MESSAGE_CHARS + 1)}, ["body", "message"], id="over-20000-chars"),
        pytest.param({}, ["body"], id="missing"),
        pytest.param({"message": "hi", "extra": 1}, ["body", "extra"], id="unknown-field"),
    ],
)
async def test_rest_run_input_is_validated(
    h: Harness, make_user: Callable[[], User], body: dict[str, Any], loc: list[str]
) -> None:
    user = make_user()
    sid = await h.new_session(user)

    response = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json=body)

    error = _error(response, 422, "validation_error")
    assert [d["loc"] for d in error["details"]] == [loc]
    assert await h.rows(user, sid) == []
    assert (await h.session(user, sid))["status"] == "pending"
    assert h.stub.requests == []


@pytest.mark.parametrize(
    "content", [pytest.param("", id="empty"), pytest.param("x" * (MAX_MESSAGE_CHARS + 1), id="over-20000-chars")]
)
async def test_agui_user_message_has_the_same_limits(h: Harness, make_user: Callable[[], User], content: str) -> None:
    user = make_user()
    thread_id = await h.new_session(user)

    response = await h.client.post("/v1/agui", headers=user.headers, json=_agui(thread_id, content))

    error = _error(response, 422, "validation_error")
    assert error["details"] == [
        {
            "loc": ["body", "messages", 0, "content"],
            "msg": "a user message must have 1 to 20000 characters",
            "type": None,
        }
    ]
    assert (await h.session(user, thread_id))["status"] == "pending"
    assert await h.rows(user, thread_id) == []
    assert h.stub.requests == []


async def test_a_long_message_within_the_token_budget_is_accepted(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("That is a long message."))
    message = "hello world " * 1666  # 19,992 characters, 3,340 tokens: within half of MEMORY_MAX_TOKENS (8000)

    result = await h.run(user, sid, message)

    assert result.status == 200
    assert types(result.events)[-1] == "RUN_FINISHED"
    assert list(text_messages(result.events).values()) == ["That is a long message."]
    rows = await h.rows(user, sid)
    assert (rows[0].seq, rows[0].content) == (1, message)


@pytest.mark.parametrize("endpoint", ["rest", "agui"])
async def test_a_message_over_the_token_budget_is_a_422_naming_the_limit(
    make_harness: MakeHarness, make_user: Callable[[], User], endpoint: str
) -> None:
    async with make_harness(**SHORT_WINDOW) as h:  # MEMORY_MAX_TOKENS 8000: a message may have 4000
        await _refused_over_budget(h, make_user(), endpoint)


async def _refused_over_budget(h: Harness, user: User, endpoint: str) -> None:
    sid = await h.new_session(user)
    message = "y" * MAX_MESSAGE_CHARS  # 20,000 characters but ~5,000 tokens: no window could hold it

    if endpoint == "rest":
        body: dict[str, Any] = {"message": message, "message_id": "m-1"}
        response = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json=body)
    else:
        body = {**_agui(sid, message), "messages": [{"id": "m-1", "role": "user", "content": message}]}
        response = await h.client.post("/v1/agui", headers=user.headers, json=body)

    error = _error(response, 422, "validation_error")
    (detail,) = error["details"]
    assert (detail["loc"], detail["type"]) == (["body", "messages", "m-1", "content"], "too_many_tokens")
    assert re.fullmatch(
        r"has 5\d\d\d tokens; a message may have at most 4000 tokens \(half of MEMORY_MAX_TOKENS\)", detail["msg"]
    ), detail
    assert (await h.session(user, sid))["status"] == "pending"
    assert await h.rows(user, sid) == []
    assert h.stub.requests == []


async def test_a_message_id_already_stored_is_409(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    first = await h.run(user, sid, "hello", message_id="m-1")
    assert types(first.events)[-1] == "RUN_FINISHED"
    before = await h.rows(user, sid)

    again = await h.client.post(
        f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hello again", "message_id": "m-1"}
    )

    assert _error(again, 409, "conflict")["message"] == "a message with this id is already stored in this session"
    assert await h.rows(user, sid) == before
    assert (await h.session(user, sid))["status"] == "completed"
    assert len(h.stub.requests) == 1
