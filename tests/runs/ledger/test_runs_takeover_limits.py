"""The bounds of a takeover (engine/runs/takeover/): a process claims only the dead process's runs it has room for
(MAX_CONCURRENT_RUNS), the sweep leaves the others to a later claim for a lease, and fails them past that or past
RUN_MAX_TAKEOVERS. The runs here were started by "a dead replica" (a RunStore of another owner) and their leases
expired; this process's lease keeper is stopped, so each round is run by hand, on a database of the test's own."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID, uuid4

from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, intent_direct
from tests.support.metrics import delta, scrape

from agent_runtime.engine.conversation.metadata import UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.agui.mapper import log_endings
from agent_runtime.engine.runs.ledger.store import RunStore
from agent_runtime.engine.runs.request.models import RunInput

EXPIRE = "UPDATE agent_chat_sessions SET lease_expires_at = now() - make_interval(secs => $2) WHERE id = ANY($1)"
STATUSES = "SELECT status, takeovers, error_code FROM agent_runs WHERE session_id = ANY($1) ORDER BY created_at"


async def _dead_runs(h: Harness, user: User, count: int) -> list[UUID]:
    """`count` runs a dead replica started (their input stored, as the service stores it), leases expired."""
    dead = RunStore(h.engine.pool, owner="a-dead-replica", lease_seconds=30, endings=log_endings())
    sids = []
    for index in range(count):
        sid = UUID(await h.new_session(user))
        turn = [NewMessage(role="user", content=f"question {index}", metadata=UserInputMetadata())]
        started = await dead.start(user.ctx, sid, uuid4(), turn, run_input=RunInput().model_dump(mode="json"))
        assert started is not None
        sids.append(sid)
    await h.engine.pool.execute(EXPIRE, sids, 1)
    return sids


async def test_a_process_takes_over_only_the_runs_it_has_room_for_and_the_rest_wait_for_room(
    make_harness: MakeHarness, make_user: Callable[[], User], own_database_url: str
) -> None:
    limits = {"max_concurrent_runs": 2, "max_concurrent_runs_per_user": 10, "run_max_takeovers": 2}
    async with make_harness(database_url=own_database_url, **limits) as h:
        await h.engine.runs.leases.stop()
        user = make_user()
        sids = await _dead_runs(h, user, 6)  # three times the room
        for _ in range(6):
            h.stub.enqueue(intent_direct("answered after all", delay_seconds=0.3))
        before = await scrape(h.client)

        await h.engine.runs.takeovers.take_over()
        assert h.engine.runs.admission.in_flight == 2
        await h.engine.runs.leases.sweep_once()  # within the lease's grace: the other four wait for room
        rows = await h.engine.pool.fetch(STATUSES, sids)
        assert sorted((r["status"], r["takeovers"]) for r in rows) == [("running", 0)] * 4 + [("running", 1)] * 2

        for _ in range(3):
            await h.engine.runs.wait_idle()
            await h.engine.runs.takeovers.take_over()
        await h.engine.runs.wait_idle()
        rows = await h.engine.pool.fetch(STATUSES, sids)
        assert [(r["status"], r["takeovers"], r["error_code"]) for r in rows] == [("completed", 1, None)] * 6
        answers = [[m["content"] for m in await h.visible(user, str(sid))] for sid in sids]
        assert answers == [[f"question {i}", "answered after all"] for i in range(6)]
        # For ops: six taken over, each from its start (no step stored), and finished here.
        after = await scrape(h.client)
        assert delta(before, after, "agent_runtime_runs_taken_over_total", resumed_from="start") == 6
        assert delta(before, after, "agent_runtime_runs_taken_over_total", resumed_from="intent") == 0
        assert delta(before, after, "agent_runtime_runs_finished_total", outcome="completed", error_code="") == 6


async def test_runs_nobody_took_over_within_a_lease_or_past_the_most_takeovers_are_lost(
    make_harness: MakeHarness, make_user: Callable[[], User], own_database_url: str
) -> None:
    async with make_harness(database_url=own_database_url, run_lease_seconds=30, run_max_takeovers=1) as h:
        await h.engine.runs.leases.stop()
        user = make_user()
        waited, retaken = await _dead_runs(h, user, 2)
        await h.engine.pool.execute("UPDATE agent_runs SET takeovers = 1 WHERE session_id = $1", retaken)
        await h.engine.pool.execute(EXPIRE, [waited], 31)  # expired longer ago than a lease: nobody had room

        before = await scrape(h.client)

        await h.engine.runs.leases.sweep_once()

        rows = await h.engine.pool.fetch(STATUSES, [waited, retaken])
        assert [(r["status"], r["error_code"]) for r in rows] == [("failed", "run_lost")] * 2
        assert delta(before, await scrape(h.client), "agent_runtime_runs_lost_total") == 2
