from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
from tests.conftest import User
from tests.support.errors import error_body

from agent_runtime.engine.conversation.metadata import (
    AssistantOutputMetadata,
    AuditMetadata,
    ToolCallMetadata,
    ToolCallSpec,
    ToolResultMetadata,
    UserInputMetadata,
)
from agent_runtime.engine.conversation.stored_messages import NewMessage
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


def _row(session_id: str, title: str) -> dict[str, object]:
    """One /v1/usage item for a session seeded by `_seed_run`."""
    return {
        "session_id": session_id,
        "title": title,
        "input_tokens": 4000,
        "output_tokens": 110,
        "cached_tokens": 1200,
        "cost": "0.0045800001",
        "currency": "CNY",
        "model_calls": 4,
    }


async def test_user_usage_range_and_pages(
    client: httpx.AsyncClient, make_user: Callable[[], User], engine: RuntimeEngine
) -> None:
    user, other = make_user(), make_user()
    first = await _seed_run(engine, user, "a")
    second = await _seed_run(engine, user, "b")
    # The other user's sessions cost the same and are newer, so they would sort first: a missing owner
    # filter shows on every page, whatever the page size.
    for title in ("not mine", "not mine either"):
        await _seed_run(engine, other, title)
    totals = {
        "input_tokens": 8000,
        "output_tokens": 220,
        "cached_tokens": 2400,
        "cost": "0.0091600002",
        "currency": "CNY",
        "model_calls": 8,
    }
    everything = await client.get("/v1/usage", headers=user.headers)
    # The budgets are the caller's spend today and this month (USER_DAILY/MONTHLY_BUDGET_CNY: 5 / 50).
    now = datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    next_month = (now.replace(day=28) + timedelta(days=4)).strftime("%Y-%m-01T00:00:00Z")
    budgets = [
        {"budget": "daily", "limit": "5.0000000000", "spent": "0.0091600002", "reserved": "0.0000000000"},
        {"budget": "monthly", "limit": "50.0000000000", "spent": "0.0091600002", "reserved": "0.0000000000"},
    ]
    assert everything.json()["budgets"] == [
        {**budget, "remaining": remaining, "resets_at": resets_at}
        for budget, remaining, resets_at in zip(
            budgets, ("4.9908399998", "49.9908399998"), (tomorrow, next_month), strict=True
        )
    ]
    assert {k: v for k, v in everything.json().items() if k != "budgets"} == {
        "start": None,
        "end": None,
        "totals": totals,
        "items": [_row(second, "b"), _row(first, "a")],  # equal cost: newest first
        "total": 2,
        "limit": 20,
        "offset": 0,
    }
    page = (await client.get("/v1/usage?limit=1", headers=user.headers)).json()
    assert (page["items"], page["total"], page["limit"], page["totals"]) == ([_row(second, "b")], 2, 1, totals)
    future = await client.get("/v1/usage", params={"start": "2999-01-01T00:00:00Z"}, headers=user.headers)
    zero = {**totals, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost": "0", "model_calls": 0}
    assert future.json()["budgets"] == everything.json()["budgets"]  # now, whatever the range
    assert {k: v for k, v in future.json().items() if k != "budgets"} == {
        "start": "2999-01-01T00:00:00Z",
        "end": None,
        "totals": zero,
        "items": [],
        "total": 0,
        "limit": 20,
        "offset": 0,
    }
    bad = await client.get(
        "/v1/usage", params={"start": "2026-02-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, headers=user.headers
    )
    assert (bad.status_code, bad.json()) == (
        422,
        {
            "error": {
                "code": "validation_error",
                "message": "start must be before end",
                "details": [{"loc": ["query", "end"], "msg": "must be after start", "type": None}],
                "request_id": bad.headers["x-request-id"],
                "error_id": None,
            }
        },
    )
    unparsable = await client.get("/v1/usage?start=yesterday", headers=user.headers)
    assert unparsable.status_code == 422
    assert [(d["loc"], d["type"]) for d in unparsable.json()["error"]["details"]] == [
        (["query", "start"], "datetime_format")
    ]


async def test_usage_of_foreign_session_is_404(
    client: httpx.AsyncClient, make_user: Callable[[], User], engine: RuntimeEngine
) -> None:
    owner, intruder = make_user(), make_user()
    sid = await _seed_run(engine, owner, "x")
    foreign = await client.get(f"/v1/sessions/{sid}/usage", headers=intruder.headers)
    assert (foreign.status_code, foreign.json()) == (404, error_body(foreign, "not_found", f"session {sid} not found"))
    anonymous = await client.get(f"/v1/sessions/{sid}/usage")
    assert (anonymous.status_code, anonymous.json()) == (
        401,
        error_body(anonymous, "unauthorized", "missing Authorization header (expected 'Bearer <token>')"),
    )
