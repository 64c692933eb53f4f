"""Leases seen from the runs: a run whose lease another replica's sweep took over stops at once (the model
request closed, RUN_ERROR `run_lost`), and a session whose run's process died runs again at once, without
waiting for the next sweep round. The lease keeper is stopped in these tests: each renewal and sweep happens
where the test calls it, never on a timer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from uuid import UUID, uuid4

from tests.conftest import User
from tests.runs.conftest import MakeHarness, intent_direct, run_error_id, types

from agent_runtime.engine.conversation.metadata import UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.agui.mapper import log_endings
from agent_runtime.engine.runs.ledger.store import RunStore

EXPIRE = "UPDATE agent_chat_sessions SET lease_expires_at = now() - interval '1 second' WHERE id = $1"
EXPIRE_SOON = "UPDATE agent_chat_sessions SET lease_expires_at = now() + interval '0.5 second' WHERE id = $1"
HOLD_BACK_SWEEPS = "SELECT 1 FROM agent_chat_sessions WHERE id = $1 FOR SHARE"


async def test_a_run_whose_lease_was_taken_over_stops_calling_the_model_and_ends_with_run_lost(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness() as h:
        await h.engine.runs.leases.stop()
        user = make_user()
        held = await h.held_run(user, "never sent")
        sid, hold, running = held.session_id, held.hold, held.result

        # This process stalled past its lease, and another replica's sweep took the session over.
        await h.engine.pool.execute(EXPIRE, UUID(sid))
        other_replica = RunStore(h.engine.pool, owner="another-replica", lease_seconds=30, endings=log_endings())
        (swept,) = [r for r in await other_replica.sweep() if r.session_id == UUID(sid)]
        await h.engine.runs.leases.renew_once()  # the renewal finds the lease gone
        async with asyncio.timeout(30):
            result = await running
            await hold.release()  # the stub now writes its reply, into a connection the run has closed
            await h.stub.wait_for_client_close()  # the model request was closed: nothing more generated or billed

        run_error_id(result.events[-1], "run_lost", "the run lost its lease on the session (it was taken over)")
        session = await h.session(user, sid)
        assert (session["status"], session["error_id"]) == ("failed", swept.error_id)  # the sweep's, not overwritten
        assert len(h.stub.requests) == 1


async def test_a_session_whose_runs_process_died_runs_again_without_waiting_for_the_sweep(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness() as h:
        await h.engine.runs.leases.stop()
        user = make_user()
        sid = await h.new_session(user)
        dead_replica = RunStore(h.engine.pool, owner="a-dead-replica", lease_seconds=30, endings=log_endings())
        turn = [NewMessage(role="user", content="lost", metadata=UserInputMetadata())]
        gone = await dead_replica.start(user.ctx, UUID(sid), uuid4(), turn)
        assert gone is not None
        await h.engine.pool.execute(EXPIRE, UUID(sid))  # its process died: nobody renews the lease

        h.stub.enqueue(intent_direct("back again"))
        result = await h.run(user, sid, "again")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        runs = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
        assert [(r["id"], r["status"], r["error_code"]) for r in runs] == [
            (result.run_id, "completed", None),
            (str(gone.run_id), "failed", "run_lost"),
        ]
        assert [(m["role"], m["content"]) for m in await h.visible(user, sid)] == [
            ("user", "lost"),
            ("user", "again"),
            ("assistant", "back again"),
        ]


async def test_a_run_whose_process_died_stops_counting_against_the_users_limit_when_its_lease_expires(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(max_concurrent_runs_per_user=1) as h:
        await h.engine.runs.leases.stop()  # no sweep: the dead run stays `running` in the database throughout
        user = make_user()
        dead_sid, new_sid = await h.new_session(user), await h.new_session(user)
        dead_replica = RunStore(h.engine.pool, owner="a-dead-replica", lease_seconds=30, endings=log_endings())
        turn = [NewMessage(role="user", content="lost", metadata=UserInputMetadata())]
        assert await dead_replica.start(user.ctx, UUID(dead_sid), uuid4(), turn) is not None

        # Its lease still runs: it counts, and the user is at the limit.
        refused = await h.run(user, new_sid, "too soon")
        assert refused.status == 429, refused.body
        assert json.loads(refused.body)["error"]["code"] == "too_many_runs"

        # Its process died: nobody renews the lease, which runs out in a moment. Other engines on this database
        # (the session-wide app, the conformance servers) sweep on their own timers: a share lock on the row,
        # taken before the lease runs out, holds their sweep back, so only the lease can decide the count.
        await h.engine.pool.execute(EXPIRE_SOON, UUID(dead_sid))
        async with h.engine.pool.acquire() as holder, holder.transaction():
            await holder.execute(HOLD_BACK_SWEEPS, UUID(dead_sid))
            await asyncio.sleep(0.6)
            h.stub.enqueue(intent_direct("admitted"))
            result = await h.run(user, new_sid, "now")

            assert types(result.events)[-1] == "RUN_FINISHED", result.body
            assert (await h.session(user, dead_sid))["status"] == "running"  # not swept: only the lease decided
        # Nothing left for a later test's keeper to sweep (and log as lost).
        assert UUID(dead_sid) in {run.session_id for run in await dead_replica.sweep()}
