"""NUL (U+0000) in text: PostgreSQL cannot store it. Client text (free-form settings included) is refused with a
422 naming the field; model output is stored with U+FFFD in its place. Never a 500. Every client field is covered
by tests/api/test_client_text.py; these pin whole error payloads and the model-output side."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.agui.test_runs_agui import run_input, user_message
from tests.runs.conftest import Harness, intent_direct, types

NUL_DETAIL = "must not contain NUL (U+0000)"


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"),
    [
        ("PUT", "/v1/profile", {"username": "a\x00b"}, ["body", "username"]),
        ("PUT", "/v1/profile", {"bio": "\x00"}, ["body", "bio"]),
        ("POST", "/v1/sessions", {"title": "t\x00"}, ["body", "title"]),
        ("GET", "/v1/sessions?q=a%00b", None, ["query", "q"]),
    ],
    ids=["username", "bio", "title", "search"],
)
async def test_client_text_with_nul_is_a_422_naming_the_field(
    h: Harness, make_user: Callable[[], User], method: str, path: str, body: object, loc: list[str]
) -> None:
    response = await h.client.request(method, path, headers=make_user().headers, json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], [(d["loc"], d["msg"]) for d in error["details"]]) == (
        "validation_error",
        [(loc, NUL_DETAIL)],
    )


async def test_session_title_update_with_nul_is_a_422(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    response = await h.client.patch(f"/v1/sessions/{sid}", headers=user.headers, json={"title": "\x00"})
    assert response.status_code == 422, response.text
    assert [d["loc"] for d in response.json()["error"]["details"]] == [["body", "title"]]


@pytest.mark.parametrize(
    ("extra", "loc"),
    [
        ({"messages": [user_message("m1", "hi\x00")]}, ["body", "messages", 0, "content"]),
        ({"context": [{"description": "d", "value": "v\x00"}]}, ["body", "context", 0, "value"]),
    ],
    ids=["message", "context"],
)
async def test_agui_input_with_nul_is_a_422_and_creates_nothing(
    h: Harness, make_user: Callable[[], User], extra: dict[str, object], loc: list[object]
) -> None:
    user = make_user()
    thread_id = await h.new_session(user)
    payload = run_input(thread_id, [user_message("m1", "hi")]) | extra
    result = await h.agui(user, payload)
    assert result.status == 422, result.body
    assert [d["loc"] for d in json.loads(result.body)["error"]["details"]] == [loc]
    assert (await h.session(user, thread_id))["status"] == "pending"
    assert await h.rows(user, thread_id) == []
    assert h.stub.requests == []


async def test_model_output_with_nul_is_stored_with_a_replacement_character(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("before\x00after"))

    result = await h.run(user, sid, "hello")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    visible = await h.visible(user, sid)
    assert [(m["role"], m["content"]) for m in visible] == [("user", "hello"), ("assistant", "before\ufffdafter")]
    # The intent's raw JSON (the audit row) has it escaped, as the model sent it: nothing to replace there.
    (audit,) = [r for r in await h.rows(user, sid) if r.seq < 0]
    assert "before\\u0000after" in audit.content


async def test_free_form_settings_with_nul_are_a_422_naming_the_nested_key(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    body = {"settings": {"version": 2, "privacy": {"note": "ok", "k": [{"x\x00": 1}]}}}
    response = await h.client.put("/v1/profile", headers=user.headers, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"] == [
        {
            "loc": ["body", "settings", "privacy", "k", 0, "x\ufffd"],
            "msg": "must not contain NUL (U+0000)",
            "type": "unstorable_text",
        }
    ]
    assert (await h.client.get("/v1/profile", headers=user.headers)).json()["created_at"] is None
