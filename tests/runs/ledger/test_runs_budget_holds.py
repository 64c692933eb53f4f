"""Budgets as reservations (migrations/0009, engine/runs/ledger/reservation.py): a run is admitted only if its
first hold fits beside what the user spent and what their runs in progress hold; the hold shows in GET /v1/usage
while the run runs and is settled to the stored costs when it ends; a hold that must grow past the budget ends
the run with `budget_exceeded` before the call is sent; a run whose process died is charged its hold less what it
stored, until its process stores its rows after all."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    PEAK_TIME,
    Harness,
    MakeHarness,
    cny_cost,
    execution_done,
    intent_direct,
    intent_needs,
    money,
    organized,
    stage_of,
    stage_request_text,
    types,
    usage,
)
from tests.stubs.deepseek_stub import RecordedRequest, StubReply

from agent_runtime.engine.conversation.metadata import UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.agui.mapper import log_endings
from agent_runtime.engine.runs.ledger.reservation import RunReservation
from agent_runtime.engine.runs.ledger.store import HeldRun, RunEndRequest, RunStore

EXPIRE = "UPDATE agent_chat_sessions SET lease_expires_at = now() - interval '1 second' WHERE id = $1"


def chunk_of(h: Harness) -> Decimal:
    return RunReservation(h.engine.settings, h.engine.templates, clock=lambda: PEAK_TIME).chunk()


def next_midnight() -> str:
    now = datetime.now(UTC)
    day = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    return day.isoformat().replace("+00:00", "Z")


async def daily_budget(h: Harness, user: User) -> dict[str, Any]:
    budgets: list[dict[str, Any]] = (await h.client.get("/v1/usage", headers=user.headers)).json()["budgets"]
    return budgets[0]


# The window the usages of the two tests below were sized against: the chunk (a new user's hold) grows with it.
CALIBRATED_WINDOW = {"memory_max_tokens": 8_000}


async def test_a_run_is_admitted_only_if_its_hold_fits_and_the_hold_settles_to_what_it_cost(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness() as probe:
        chunk = chunk_of(probe)
    # The default tasks and window, priced at the dearest model of the chain (deepseek-v4-pro, at peak).
    assert chunk == (7_000 * Decimal(9) + 2_048 * Decimal(27)) / 1_000_000
    budget = chunk * Decimal("2.5")
    async with make_harness(user_daily_budget_cny=budget) as h:
        user = make_user()
        sessions = [await h.new_session(user) for _ in range(3)]
        hold = h.stub.hold_replies()
        h.stub.responder = lambda request: intent_direct("held", usage=usage(1000, 200))
        first = [asyncio.create_task(h.run(user, sid, "go")) for sid in sessions[:2]]
        async with asyncio.timeout(30):
            await h.stub.wait_for_requests(2)

        refused = await h.run(user, sessions[2], "one too many")
        assert refused.status == 402, refused.body
        error = json.loads(refused.body)["error"]
        day = next_midnight()
        left = budget - 2 * chunk
        assert error["code"] == "budget_exceeded"
        assert error["message"] == (
            f"your daily budget of {budget.normalize():f} CNY has {left.normalize():f} CNY left "
            f"(0 spent, {(2 * chunk).normalize():f} held by runs in progress), and a run may cost up to "
            f"{chunk.normalize():f}; it resets at {day}"
        )
        assert await daily_budget(h, user) == {
            "budget": "daily",
            "limit": money(budget),
            "spent": money(Decimal(0)),
            "reserved": money(2 * chunk),
            "remaining": money(left),
            "resets_at": day,
        }

        await hold.release()
        assert [types(r.events)[-1] for r in await asyncio.gather(*first)] == ["RUN_FINISHED"] * 2
        cost = cny_cost(1000, 200)
        assert await daily_budget(h, user) == {
            "budget": "daily",
            "limit": money(budget),
            "spent": money(2 * cost),
            "reserved": money(Decimal(0)),
            "remaining": money(budget - 2 * cost),
            "resets_at": day,
        }
        again = await h.run(user, sessions[2], "now it fits")
        assert types(again.events)[-1] == "RUN_FINISHED", again.body


async def test_a_run_whose_hold_cannot_grow_ends_with_budget_exceeded_before_the_call_is_sent(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(**CALIBRATED_WINDOW) as probe:
        chunk = chunk_of(probe)
    # Room for the first hold and not a grain more: the first call that the budget has no room for, even with its
    # output bounded, is refused.
    async with make_harness(**CALIBRATED_WINDOW, user_daily_budget_cny=chunk) as h:
        user = make_user()
        sid = await h.new_session(user)
        # Every answer breaks the intent contract: each repair is another call, each billed about half the budget.
        h.stub.responder = lambda request: StubReply(content="not json", usage=usage(30_000, 200))
        started = time.monotonic()
        result = await h.run(user, sid, "go")
        # No other run of the user's could give room back: refused at once, not after waiting for one.
        assert time.monotonic() - started < 5

        assert types(result.events)[-1] == "RUN_ERROR", result.body
        ended = result.events[-1]
        assert ended["code"] == "budget_exceeded", ended
        sent = len(h.stub.requests)
        assert 1 <= sent < 1 + h.engine.settings.stage_max_json_retries  # stopped before a repair went out
        budget = await daily_budget(h, user)
        assert (budget["spent"], budget["reserved"]) == (money(sent * cny_cost(30_000, 200)), money(Decimal(0)))
        assert Decimal(budget["spent"]) <= chunk
        session = (await h.client.get(f"/v1/sessions/{sid}", headers=user.headers)).json()
        assert session["status"] == "failed"


async def test_a_hold_grows_by_what_the_next_call_misses_so_a_run_near_the_edge_finishes(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(**CALIBRATED_WINDOW) as probe:
        chunk = chunk_of(probe)
    budget = chunk * Decimal("1.5")
    async with make_harness(**CALIBRATED_WINDOW, user_daily_budget_cny=budget) as h:
        user = make_user()
        sid = await h.new_session(user)
        # Three calls each billed about half a chunk: the organization's worst case does not fit beside what the
        # first two cost, in the hold or in the budget's room, but the call with fewer output tokens does.
        billed = usage(30_000, 200)
        h.stub.enqueue(
            intent_needs("Compute 6*7.", usage=billed),
            execution_done("42", {"result": "42"}, usage=billed),
            organized("It is 42.", usage=billed),
        )
        result = await h.run(user, sid, "what is 6*7?")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        asked = [int(r.fields["max_tokens"]) for r in h.stub.requests]
        assert asked[:2] == [2048, 1024]
        assert 256 <= asked[2] < 2048, asked
        spent = await daily_budget(h, user)
        assert (spent["spent"], spent["reserved"]) == (money(3 * cny_cost(30_000, 200)), money(Decimal(0)))
        assert Decimal(spent["spent"]) <= budget


async def test_a_run_at_the_edge_waits_for_the_users_other_run_to_give_its_hold_back(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(**CALIBRATED_WINDOW) as probe:
        chunk = chunk_of(probe)
    # Room for two new runs' holds (a chunk each) and not for the second one's growth, until the first ends.
    budget = chunk * Decimal("2.1")
    billed = usage(30_000, 200)

    def respond(request: RecordedRequest) -> StubReply:
        if stage_request_text(request).startswith("slow"):
            return intent_direct("slow and cheap", usage=usage(1000, 200), delay_seconds=2.0)
        stage = stage_of(request)
        if stage == "execution":
            return execution_done("42", {"result": "42"}, usage=billed)
        if stage == "organization":
            return organized("It is 42.", usage=billed)
        return intent_needs("Compute 6*7.", usage=billed)

    async with make_harness(**CALIBRATED_WINDOW, user_daily_budget_cny=budget) as h:
        user = make_user()
        slow, edge = await h.new_session(user), await h.new_session(user)
        h.stub.responder = respond
        first = asyncio.create_task(h.run(user, slow, "slow one"))
        async with asyncio.timeout(30):
            await h.stub.wait_for_requests(1)  # admitted, holding a chunk, in its 2 s call

        started = time.monotonic()
        result = await h.run(user, edge, "what is 6*7?")

        # Its last call waited for the first run to end and give back what it held beyond its cost.
        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        assert time.monotonic() - started > 1.0
        assert types((await first).events)[-1] == "RUN_FINISHED"
        spent = await daily_budget(h, user)
        cost = 3 * cny_cost(30_000, 200) + cny_cost(1000, 200)
        assert (spent["spent"], spent["reserved"]) == (money(cost), money(Decimal(0)))
        assert Decimal(spent["spent"]) <= budget


async def test_a_run_needs_what_its_calls_cost_not_their_worst_cases_so_several_calls_fit_one_hold(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness() as probe:
        chunk = chunk_of(probe)
    # The three calls' worst cases together are more than the chunk the run holds, and the budget has no more.
    async with make_harness(user_daily_budget_cny=chunk) as h:
        user = make_user()
        sid = await h.new_session(user)
        billed = usage(1000, 200)
        h.stub.enqueue(
            intent_needs("Compute 6*7.", usage=billed),
            execution_done("42", {"result": "42"}, usage=billed),
            organized("It is 42.", usage=billed),
        )
        result = await h.run(user, sid, "what is 6*7?")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        asked = [int(r.fields["max_tokens"]) for r in h.stub.requests]
        assert asked == [2048, 1024, 2048]  # none bounded: the hold had room for each beside what the others cost
        spent = await daily_budget(h, user)
        assert (spent["spent"], spent["reserved"]) == (money(3 * cny_cost(1000, 200)), money(Decimal(0)))


async def test_a_user_with_completed_runs_is_admitted_holding_twice_their_mean_run_or_their_dearest(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness() as probe:
        chunk = chunk_of(probe)
    cheap, dear = cny_cost(1000, 200), cny_cost(30_000, 200)
    # Room for the first run's chunk (no history yet), and then for the history below.
    budget = chunk + Decimal("0.001")
    async with make_harness(user_daily_budget_cny=budget) as h:
        user = make_user()
        sid = await h.new_session(user)
        for billed in (usage(1000, 200), usage(1000, 200), usage(30_000, 200)):
            h.stub.enqueue(intent_direct("ok", usage=billed))
            assert types((await h.run(user, sid, "go")).events)[-1] == "RUN_FINISHED"
        spent = 2 * cheap + dear
        # Twice the mean (2 * (2 * cheap + dear) / 3) is less than the dearest run: the run would hold that.
        assert 2 * spent / 3 < dear <= chunk
        refused = await h.run(user, sid, "one more")

        assert refused.status == 402, refused.body
        message = json.loads(refused.body)["error"]["message"]
        assert f"left ({money(spent).rstrip('0')} spent, 0 held by runs in progress)" in message, message
        assert message.endswith(f"and a run may cost up to {dear.normalize():f}; it resets at {next_midnight()}")

        # Another user's history is not theirs: with none, they hold the chunk (their call fits in it, no growth).
        other = make_user()
        other_sid = await h.new_session(other)
        hold = h.stub.hold_replies()
        h.stub.enqueue(intent_direct("ok", usage=usage(1000, 200)))
        running = asyncio.create_task(h.run(other, other_sid, "go"))
        async with asyncio.timeout(30):
            await h.stub.wait_for_requests(len(h.stub.requests) + 1)
        assert (await daily_budget(h, other))["reserved"] == money(chunk)
        await hold.release()
        assert types((await running).events)[-1] == "RUN_FINISHED"


@pytest.mark.parametrize(
    ("renewals", "charged"),
    [
        pytest.param(["0.02", "0.01"], "0.02", id="what-it-had-sent"),  # an estimate only grows
        pytest.param(["0.5"], "0.3", id="at-most-its-hold"),
        pytest.param([], "0", id="never-renewed"),
    ],
)
async def test_a_run_whose_process_died_is_charged_what_it_had_sent_until_its_process_stores_what_it_spent(
    h: Harness, make_user: Callable[[], User], renewals: list[str], charged: str
) -> None:
    await h.engine.runs.leases.stop()
    user = make_user()
    sid = UUID(await h.new_session(user))
    hold = Decimal("0.3")
    dead = RunStore(
        h.engine.pool, owner="a-dead-replica", lease_seconds=30, endings=log_endings(), reserve=lambda: hold
    )
    turn = [NewMessage(role="user", content="lost", metadata=UserInputMetadata())]
    started = await dead.start(user.ctx, sid, uuid4(), turn)
    assert started is not None and started.reserved_cny == hold
    assert ((await daily_budget(h, user))["spent"], (await daily_budget(h, user))["reserved"]) == (
        money(Decimal(0)),
        money(hold),
    )
    # Its process renewed its lease with the estimate of what its calls had cost so far, then died.
    for sent in renewals:
        run = HeldRun(session_id=sid, user_id=user.ctx.user_id, run_id=started.run_id, sent_cny=Decimal(sent))
        assert (await dead.renew([run])).kept == {started.run_id}

    await h.engine.pool.execute(EXPIRE, sid)
    await h.engine.runs.leases.sweep_once()
    swept = await daily_budget(h, user)
    assert (swept["spent"], swept["reserved"]) == (money(Decimal(charged)), money(Decimal(0)))

    # Its process was only stalled: it ends the run and stores its rows, which hold what it spent.
    end = await dead.finish(user.ctx, started, RunEndRequest(outcome="completed", run_status="completed", rows=[]))
    assert end.owned is False
    settled = await daily_budget(h, user)
    assert (settled["spent"], settled["reserved"]) == (money(Decimal(0)), money(Decimal(0)))
