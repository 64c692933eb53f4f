from __future__ import annotations

from collections.abc import Callable
from uuid import uuid4

import httpx
import pytest
from tests.conftest import User
from tests.support.errors import error_body
from tests.support.rows import stored_rows

from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata, UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runtime import RuntimeEngine


async def _create(client: httpx.AsyncClient, user: User, **body: object) -> dict[str, object]:
    response = await client.post("/v1/sessions", json=body or None, headers=user.headers)
    assert response.status_code == 201, response.text
    data: dict[str, object] = response.json()
    return data


async def test_create_freezes_billing(client: httpx.AsyncClient, user: User) -> None:
    await client.put(
        "/v1/profile", json={"settings": {"version": 2, "preferences": {"country": "SG"}}}, headers=user.headers
    )
    session = await _create(client, user)
    assert {k: session[k] for k in ("title", "status", "error_id", "billing_currency", "billing_country_snapshot")} == {
        "title": None,
        "status": "pending",
        "error_id": None,
        "billing_currency": "CNY",
        "billing_country_snapshot": "SG",
    }
    assert session["state_snapshot"] == {"status": "pending", "run_id": None, "error_id": None}
    assert session["model"] == "demo/agent"
    await client.put(
        "/v1/profile", json={"settings": {"version": 2, "preferences": {"country": "US"}}}, headers=user.headers
    )
    again = (await client.get(f"/v1/sessions/{session['id']}", headers=user.headers)).json()
    assert again["billing_country_snapshot"] == "SG"


async def test_create_with_title_and_without_body(client: httpx.AsyncClient, user: User) -> None:
    titled = await _create(client, user, title="  My   plan  ")
    assert titled["title"] == "My plan"
    blank = await client.post("/v1/sessions", json={"title": "   "}, headers=user.headers)
    assert blank.status_code == 422
    assert blank.json()["error"]["details"][0]["loc"] == ["body", "title"]


async def test_list_newest_first_paginated_and_searchable(client: httpx.AsyncClient, user: User) -> None:
    ids = [(await _create(client, user, title=f"trip {i}"))["id"] for i in range(5)]
    other = await _create(client, user, title="100%_special")
    page = (await client.get("/v1/sessions?limit=2&offset=1", headers=user.headers)).json()
    assert page["total"] == 6 and page["limit"] == 2 and page["offset"] == 1
    assert [s["id"] for s in page["items"]] == [ids[4], ids[3]]
    found = (await client.get("/v1/sessions?q=TRIP 3", headers=user.headers)).json()
    assert [s["id"] for s in found["items"]] == [ids[3]] and found["total"] == 1
    literal = (await client.get("/v1/sessions", params={"q": "%_"}, headers=user.headers)).json()
    assert [s["id"] for s in literal["items"]] == [other["id"]]
    past_end = (await client.get("/v1/sessions?offset=100", headers=user.headers)).json()
    assert past_end == {"items": [], "total": 6, "limit": 20, "offset": 100}


@pytest.mark.parametrize(
    ("query", "field", "kind"),
    [
        ("limit=0", "limit", "greater_than_equal"),
        ("limit=-1", "limit", "greater_than_equal"),
        ("limit=101", "limit", "less_than_equal"),
        ("offset=-1", "offset", "greater_than_equal"),
        ("limit=abc", "limit", "int_parsing"),
    ],
)
async def test_bad_paging_is_422(client: httpx.AsyncClient, user: User, query: str, field: str, kind: str) -> None:
    response = await client.get(f"/v1/sessions?{query}", headers=user.headers)
    assert response.status_code == 422
    error = response.json()["error"]
    assert [(d["loc"], d["type"]) for d in error["details"]] == [(["query", field], kind)]
    assert (error["code"], error["message"]) == ("validation_error", f"invalid request: query.{field}")


async def test_patch_and_delete(client: httpx.AsyncClient, user: User, engine: RuntimeEngine) -> None:
    session = await _create(client, user)
    sid = session["id"]
    patched = await client.patch(f"/v1/sessions/{sid}", json={"title": "Renamed"}, headers=user.headers)
    assert patched.status_code == 200 and patched.json()["title"] == "Renamed"
    empty = await client.patch(f"/v1/sessions/{sid}", json={}, headers=user.headers)
    assert (empty.status_code, [(d["loc"], d["type"]) for d in empty.json()["error"]["details"]]) == (
        422,
        [(["body", "title"], "missing")],
    )
    await engine.messages.append(user.ctx, sid, [NewMessage(role="user", content="hi", metadata=UserInputMetadata())])  # type: ignore[arg-type]
    deleted = await client.delete(f"/v1/sessions/{sid}", headers=user.headers)
    assert deleted.status_code == 204 and deleted.content == b""
    gone = await client.get(f"/v1/sessions/{sid}", headers=user.headers)
    assert (gone.status_code, gone.json()) == (404, error_body(gone, "not_found", f"session {sid} not found"))
    assert await engine.pool.fetchval("SELECT count(*) FROM agent_chat_messages WHERE session_id = $1", sid) == 0
    again = await client.delete(f"/v1/sessions/{sid}", headers=user.headers)
    assert (again.status_code, again.json()) == (404, error_body(again, "not_found", f"session {sid} not found"))


async def test_other_users_session_is_404_everywhere(
    client: httpx.AsyncClient, make_user: Callable[[], User], engine: RuntimeEngine
) -> None:
    owner, intruder = make_user(), make_user()
    session = await _create(client, owner, title="secret")
    sid = session["id"]
    await engine.messages.append(owner.ctx, sid, [NewMessage(role="user", content="x", metadata=UserInputMetadata())])  # type: ignore[arg-type]
    missing = str(uuid4())
    for target in (sid, missing):
        for method, path, body in (
            ("GET", f"/v1/sessions/{target}", None),
            ("PATCH", f"/v1/sessions/{target}", {"title": "pwned"}),
            ("DELETE", f"/v1/sessions/{target}", None),
            ("GET", f"/v1/sessions/{target}/messages", None),
        ):
            response = await client.request(method, path, json=body, headers=intruder.headers)
            assert response.status_code == 404, (method, path)
            assert response.json()["error"] == {
                "code": "not_found",
                "message": f"session {target} not found",
                "details": [],
                "request_id": response.headers["x-request-id"],
                "error_id": None,
            }
    assert (await client.get("/v1/sessions", headers=intruder.headers)).json()["total"] == 0
    still = (await client.get(f"/v1/sessions/{sid}", headers=owner.headers)).json()
    assert still["title"] == "secret"


async def test_bad_uuid_is_422(client: httpx.AsyncClient, user: User) -> None:
    response = await client.get("/v1/sessions/not-a-uuid", headers=user.headers)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["loc"] == ["path", "session_id"]


async def test_messages_visible_only_in_seq_order(client: httpx.AsyncClient, user: User, engine: RuntimeEngine) -> None:
    from agent_runtime.engine.conversation.metadata import AuditMetadata

    sid = (await _create(client, user))["id"]
    await engine.messages.append(
        user.ctx,
        sid,  # type: ignore[arg-type]
        [
            NewMessage(role="user", content="  first\nquestion  ", metadata=UserInputMetadata(), message_id="m1"),
            NewMessage(role="assistant", content="{raw}", metadata=AuditMetadata(stage="intent"), message_id="a1"),
            NewMessage(role="assistant", content="answer", metadata=AssistantOutputMetadata(), message_id="m2"),
        ],
    )
    await engine.messages.append(
        user.ctx,
        sid,  # type: ignore[arg-type]
        [NewMessage(role="user", content="second", metadata=UserInputMetadata(), message_id="m3")],
    )
    page = (await client.get(f"/v1/sessions/{sid}/messages?limit=2", headers=user.headers)).json()
    assert page["total"] == 3 and page["limit"] == 2
    assert [(m["seq"], m["message_id"], m["role"], m["content"]) for m in page["items"]] == [
        (1, "m1", "user", "  first\nquestion  "),
        (2, "m2", "assistant", "answer"),
    ]
    assert page["items"][0]["metadata"] == {"kind": "user_input", "run_id": None}
    assert page["items"][1]["currency"] == "CNY" and page["items"][1]["cost"] == "0.0000000000"
    rest = (await client.get(f"/v1/sessions/{sid}/messages?offset=2", headers=user.headers)).json()
    assert [m["seq"] for m in rest["items"]] == [3]
    all_rows = await stored_rows(engine.pool, user.ctx, sid)  # type: ignore[arg-type]
    assert sorted(m.seq for m in all_rows) == [-1, 1, 2, 3]
    session = (await client.get(f"/v1/sessions/{sid}", headers=user.headers)).json()
    assert session["title"] == "first question"
