from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import httpx
from tests.conftest import User

from agent_runtime.engine.messages.metadata import (
    AssistantOutputMetadata,
    AuditMetadata,
    ToolCallMetadata,
    ToolCallSpec,
    ToolResultMetadata,
    UserInputMetadata,
)
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate


async def _seed_run(engine: RuntimeEngine, user: User, title: str) -> str:
    session = await engine.sessions.create(user.ctx, SessionCreate(title=title))
    call = ToolCallSpec(id="call_1", name="calculator", arguments="{}")
    await engine.messages.append(
        user.ctx,
        session.id,
        [
            NewMessage(role="user", content="2+2?", metadata=UserInputMetadata()),
            NewMessage(
                role="assistant",
                content="{}",
                input_tokens=1000,
                output_tokens=50,
                cost=Decimal("0.0021500000"),
                metadata=AuditMetadata(stage="intent", cost_source="custom_pricing", cached_tokens=200),
            ),
            NewMessage(
                role="assistant",
                input_tokens=1200,
                output_tokens=20,
                cost=Decimal("0.0023000000"),
                metadata=ToolCallMetadata(
                    tool_calls=[call], stage="execution", cost_source="custom_pricing", cached_tokens=1000
                ),
            ),
            NewMessage(role="tool", content="4", metadata=ToolResultMetadata(tool_call_id="call_1")),
            NewMessage(
                role="assistant",
                content="{}",
                input_tokens=1300,
                output_tokens=30,
                cost=Decimal("0.0001"),
                metadata=AuditMetadata(stage="execution", cost_source="litellm_catalog"),
            ),
            NewMessage(
                role="assistant",
                content="4",
                input_tokens=500,
                output_tokens=10,
                cost=Decimal("0.0000300001"),
                metadata=AssistantOutputMetadata(stage="organization", cost_source="custom_pricing", cached_tokens=0),
            ),
        ],
    )
    return str(session.id)


async def test_session_usage_sums_rows_by_stage(client: httpx.AsyncClient, user: User, engine: RuntimeEngine) -> None:
    sid = await _seed_run(engine, user, "usage")
    response = await client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)
    assert response.status_code == 200
    assert response.json() == {
        "session_id": sid,
        "total": {
            "input_tokens": 4000,
            "output_tokens": 110,
            "cached_tokens": 1200,
            "cost": "0.0045800001",
            "currency": "CNY",
            "model_calls": 4,
        },
        "by_stage": [
            {
                "stage": "execution",
                "input_tokens": 2500,
                "output_tokens": 50,
                "cached_tokens": 1000,
                "cost": "0.0024000000",
                "currency": "CNY",
                "model_calls": 2,
            },
            {
                "stage": "intent",
                "input_tokens": 1000,
                "output_tokens": 50,
                "cached_tokens": 200,
                "cost": "0.0021500000",
                "currency": "CNY",
                "model_calls": 1,
            },
            {
                "stage": "organization",
                "input_tokens": 500,
                "output_tokens": 10,
                "cached_tokens": 0,
                "cost": "0.0000300001",
                "currency": "CNY",
                "model_calls": 1,
            },
        ],
    }
    rows = await engine.pool.fetchrow(
        "SELECT sum(cost) AS c, sum(input_tokens) AS i FROM agent_chat_messages WHERE session_id = $1::uuid", sid
    )
    assert (str(rows["c"]), rows["i"]) == ("0.0045800001", 4000)


async def test_empty_session_usage_is_zero(client: httpx.AsyncClient, user: User) -> None:
    sid = (await client.post("/v1/sessions", headers=user.headers)).json()["id"]
    body = (await client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)).json()
    assert body == {
        "session_id": sid,
        "total": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cached_tokens": 0,
            "cost": "0",
            "currency": "CNY",
            "model_calls": 0,
        },
        "by_stage": [],
    }


async def test_user_usage_range_and_pages(
    client: httpx.AsyncClient, make_user: Callable[[], User], engine: RuntimeEngine
) -> None:
    user, other = make_user(), make_user()
    first = await _seed_run(engine, user, "a")
    second = await _seed_run(engine, user, "b")
    await _seed_run(engine, other, "not mine")
    page = (await client.get("/v1/usage?limit=1", headers=user.headers)).json()
    assert page["total"] == 2 and page["limit"] == 1 and page["offset"] == 0
    assert page["totals"]["cost"] == "0.0091600002" and page["totals"]["input_tokens"] == 8000
    assert page["items"][0]["session_id"] in (first, second) and len(page["items"]) == 1
    future = (await client.get("/v1/usage", params={"start": "2999-01-01T00:00:00Z"}, headers=user.headers)).json()
    assert future["total"] == 0 and future["items"] == [] and future["totals"]["cost"] == "0"
    bad = await client.get(
        "/v1/usage", params={"start": "2026-02-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, headers=user.headers
    )
    assert bad.status_code == 422 and bad.json()["error"]["message"] == "start must be before end"
    assert (await client.get("/v1/usage?start=yesterday", headers=user.headers)).status_code == 422


async def test_usage_of_foreign_session_is_404(
    client: httpx.AsyncClient, make_user: Callable[[], User], engine: RuntimeEngine
) -> None:
    owner, intruder = make_user(), make_user()
    sid = await _seed_run(engine, owner, "x")
    assert (await client.get(f"/v1/sessions/{sid}/usage", headers=intruder.headers)).status_code == 404
    assert (await client.get(f"/v1/sessions/{sid}/usage")).status_code == 401
