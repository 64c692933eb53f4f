"""Per-user quotas and CNY budgets, enforced by the database (so across replicas and under concurrency):
runs per minute (429 `rate_limited`), sessions per user (429 `too_many_sessions`), daily and monthly budgets
(402 `budget_exceeded`, naming the budget and when it resets). Each is refused before any stream starts and
leaves nothing behind. How a run's hold is taken, grown and settled: tests/runs/ledger/test_runs_budget_holds.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from tests.conftest import User
from tests.runs.conftest import PEAK_TIME, Harness, MakeHarness, RunResult, intent_direct, types, usage

from agent_runtime.engine.runs.ledger.reservation import RunReservation


def error_of(result: RunResult, status: int, code: str) -> dict[str, Any]:
    assert result.status == status, result.body
    error: dict[str, Any] = json.loads(result.body)["error"]
    assert error["code"] == code, error
    return error


def next_utc_midnight() -> datetime:
    now = datetime.now(UTC)
    return datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)


async def test_runs_per_minute_are_limited_and_two_starts_at_the_limit_let_exactly_one_through(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(max_runs_per_user_per_minute=2) as h:
        user = make_user()
        sid = await h.new_session(user)
        for text in ("one", "two"):
            assert types((await h.run(user, sid, text)).events)[-1] == "RUN_FINISHED"
        refused = await h.run(user, sid, "three")
        error = error_of(refused, 429, "rate_limited")
        assert (
            error["message"] == "you started as many runs in the last minute as you may (MAX_RUNS_PER_USER_PER_MINUTE)"
        )
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert [m["content"] for m in await h.visible(user, sid)] == ["one", "echo: one", "two", "echo: two"]
        # Retry-After is when the oldest run of the minute leaves it: both started 30 s ago, so in 30 s.
        await h.engine.pool.execute(
            "UPDATE agent_runs SET created_at = now() - interval '30 seconds' WHERE user_id = $1", user.id
        )
        later = await h.run(user, sid, "four")
        error_of(later, 429, "rate_limited")
        assert 25 <= int(later.headers["retry-after"]) <= 30

    async with make_harness(max_runs_per_user_per_minute=1) as h:
        for _ in range(5):  # a race that let both through would show in one of the rounds
            user = make_user()
            first, second = [await h.new_session(user) for _ in range(2)]
            results = await asyncio.gather(h.run(user, first, "a"), h.run(user, second, "b"))
            assert sorted(r.status for r in results) == [200, 429], [r.body for r in results]


async def test_sessions_per_user_are_limited_also_under_concurrency(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(max_sessions_per_user=2) as h:
        user = make_user()
        for _ in range(2):
            await h.new_session(user)
        third = await h.client.post("/v1/sessions", headers=user.headers, json={})
        assert third.status_code == 429, third.text
        assert third.json()["error"]["code"] == "too_many_sessions"
        assert (
            third.json()["error"]["message"]
            == "you have as many sessions as you may (MAX_SESSIONS_PER_USER); delete some"
        )
        listed = await h.client.get("/v1/sessions", headers=user.headers)
        assert listed.json()["total"] == 2
        other = make_user()
        assert (await h.client.post("/v1/sessions", headers=other.headers, json={})).status_code == 201

    async with make_harness(max_sessions_per_user=1) as h:
        for _ in range(5):
            user = make_user()
            created = await asyncio.gather(
                *(h.client.post("/v1/sessions", headers=user.headers, json={}) for _ in range(2))
            )
            assert sorted(r.status_code for r in created) == [201, 429], [r.text for r in created]


async def test_a_daily_budget_below_one_calls_worst_case_admits_no_run_and_says_why_with_402(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(user_daily_budget_cny=Decimal("0.001")) as h:
        user = make_user()
        sid = await h.new_session(user)
        refused = await h.run(user, sid, "go")
        error = error_of(refused, 402, "budget_exceeded")
        resets = next_utc_midnight()
        chunk = RunReservation(h.engine.settings, h.engine.templates, clock=lambda: PEAK_TIME).chunk()
        assert error["message"] == (
            f"your daily budget of 0.001 CNY has 0.001 CNY left (0 spent, 0 held by runs in progress), "
            f"and a run may cost up to {chunk.normalize():f}; it resets at {resets.isoformat().replace('+00:00', 'Z')}"
        )
        assert error["details"] == [
            {"loc": ["budget", "daily"], "msg": f"resets at {resets.isoformat()}", "type": None}
        ]
        assert 0 < int(refused.headers["retry-after"]) <= 86_400
        assert await h.visible(user, sid) == [] and h.stub.requests == []  # refused before anything is stored or sent

        other = make_user()  # budgets are per user
        async with make_harness() as roomy:
            roomy.stub.enqueue(intent_direct("fine"))
            assert types((await roomy.run(other, await roomy.new_session(other), "hi")).events)[-1] == "RUN_FINISHED"


async def test_the_monthly_budget_is_checked_too(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    chunk = RunReservation(h.engine.settings, h.engine.templates, clock=lambda: PEAK_TIME).chunk()
    async with make_harness(user_monthly_budget_cny=chunk * 2, user_daily_budget_cny=Decimal(0)) as capped:
        user = make_user()
        sid = await capped.new_session(user)
        capped.stub.enqueue(intent_direct("pricey", usage=usage(1000, 200)))
        assert types((await capped.run(user, sid, "go")).events)[-1] == "RUN_FINISHED"
        # Spent so far this month: more than one hold's worth is gone.
        await capped.engine.pool.execute(
            "UPDATE agent_chat_messages SET cost = $2 WHERE user_id = $1 AND metadata ? 'cost_source'",
            user.id,
            chunk * Decimal("1.5"),
        )
        error = error_of(await capped.run(user, sid, "more"), 402, "budget_exceeded")
        assert error["message"].startswith(f"your monthly budget of {(chunk * 2).normalize():f} CNY has ")
        daily = (await capped.client.get("/v1/usage", headers=user.headers)).json()["budgets"][0]
        assert (daily["limit"], daily["remaining"]) == (None, None)  # 0 = no daily limit

        # The month turns: what was spent is last month's, and this month's budget is whole again (the run, last
        # month's too, still sizes what the next one holds: a whole chunk).
        for table in ("agent_chat_messages", "agent_runs"):
            await capped.engine.pool.execute(
                f"UPDATE {table} SET created_at = date_trunc('month', now(), 'UTC') - interval '1 day'"
                " WHERE user_id = $1",
                user.id,
            )
        capped.stub.enqueue(intent_direct("a new month"))
        assert types((await capped.run(user, sid, "again")).events)[-1] == "RUN_FINISHED"


async def test_zero_means_no_limit_for_every_quota(make_harness: MakeHarness, make_user: Callable[[], User]) -> None:
    zero = {
        "max_concurrent_runs_per_user": 0,
        "max_runs_per_user_per_minute": 0,
        "max_sessions_per_user": 0,
        "user_daily_budget_cny": Decimal(0),
        "user_monthly_budget_cny": Decimal(0),
    }
    async with make_harness(**zero) as h:
        h.stub.responder = lambda request: intent_direct("done", delay_seconds=0.5)
        user = make_user()
        # More sessions than the default MAX_SESSIONS_PER_USER (seeded: a thousand POSTs would be slow).
        await h.engine.pool.execute(
            "INSERT INTO agent_chat_sessions (id, user_id, billing_country_snapshot)"
            " SELECT gen_random_uuid(), $1, 'CN' FROM generate_series(1, 1000)",
            user.id,
        )
        sessions = [await h.new_session(user) for _ in range(5)]
        # More runs at once than the default MAX_CONCURRENT_RUNS_PER_USER (4), all in flight together.
        running = [asyncio.create_task(h.run(user, sid, "at once")) for sid in sessions]
        async with asyncio.timeout(30):
            await h.stub.wait_for_requests(5)
        assert all(types(r.events)[-1] == "RUN_FINISHED" for r in await asyncio.gather(*running))

        # More runs this minute than the default MAX_RUNS_PER_USER_PER_MINUTE (20), and more spent than the
        # default daily and monthly budgets (5 / 50 CNY): the next run is still admitted.
        await h.engine.pool.execute(
            "INSERT INTO agent_runs (id, session_id, user_id, status, finished_at)"
            " SELECT gen_random_uuid(), $1, $2, 'completed', now() FROM generate_series(1, 25)",
            UUID(sessions[0]),
            user.id,
        )
        await h.engine.pool.execute(
            "UPDATE agent_chat_messages SET cost = 100 WHERE user_id = $1 AND session_id = $2 AND seq = 1",
            user.id,
            UUID(sessions[0]),
        )
        h.stub.responder = lambda request: intent_direct("still admitted")
        again = await h.run(user, sessions[1], "again")
        assert types(again.events)[-1] == "RUN_FINISHED", again.body
        budgets = (await h.client.get("/v1/usage", headers=user.headers)).json()["budgets"]
        assert [(b["budget"], b["limit"], b["remaining"]) for b in budgets] == [
            ("daily", None, None),
            ("monthly", None, None),
        ]
