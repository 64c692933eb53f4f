"""Runs that end outside the flow: the drain lets a run finish within SHUTDOWN_GRACE_SECONDS and waits for it,
interrupts one past it (RUN_ERROR
`run_interrupted` in their stream, a failed session with the same error_id, the user's message kept), or hands it
over to another replica when takeovers are on, and a start whose input cannot be stored (refused whole: nothing left
behind, one error_id)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from uuid import UUID

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    RUN_START,
    STAGE_START,
    Harness,
    MakeHarness,
    run_error_id,
    types,
)
from tests.support.metrics import delta, scrape

from agent_runtime.engine.runs.ledger.store import RunStore

INTERRUPTED = "the server shut down before the run finished"


LEASE = "SELECT s.status, s.lease_expires_at <= now() AS released, r.status AS run_status FROM agent_chat_sessions s"
LEASE += " JOIN agent_runs r ON r.id = s.run_id WHERE s.id = $1"


async def test_drain_hands_a_run_past_the_grace_period_over_when_takeovers_are_on(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(shutdown_grace_seconds=0.3, run_max_takeovers=2) as timed:
        user = make_user()
        held = await timed.held_run(user, "answered elsewhere")
        sid, hold, running = held.session_id, held.hold, held.result
        before = await scrape(timed.client)

        async with asyncio.timeout(30):
            await timed.engine.runs.drain()
        assert timed.engine.runs.admission.in_flight == 0
        timed.engine.runs.admission.draining = False
        result = await running
        await hold.release()

        # This connection's stream ends; the run stays running with its lease released for another replica's sweep.
        assert types(result.events)[-1] == "RUN_ERROR" and result.events[-1]["code"] == "run_handed_over"
        row = await timed.engine.pool.fetchrow(LEASE, UUID(sid))
        assert (row["status"], row["released"], row["run_status"]) == ("running", True, "running")
        after = await scrape(timed.client)
        assert delta(before, after, "agent_runtime_runs_finished_total", outcome="handed_over", error_code="") == 1
        assert (
            delta(before, after, "agent_runtime_runs_finished_total", outcome="failed", error_code="run_interrupted")
            == 0
        )


async def test_drain_interrupts_a_run_past_the_grace_period_and_refuses_new_ones(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(shutdown_grace_seconds=0.3) as timed:
        user = make_user()
        held = await timed.held_run(user, "never sent")
        sid, hold, running = held.session_id, held.hold, held.result

        other = await timed.new_session(user)  # before the drain: from then on every request is refused
        draining = asyncio.create_task(timed.engine.runs.drain())
        await asyncio.sleep(0)  # the drain has begun: new work is refused from now on
        ready = await timed.client.get("/health/ready")
        refused = await timed.client.post(f"/v1/sessions/{other}/runs", headers=user.headers, json={"message": "more"})
        async with asyncio.timeout(30):  # a drain that never interrupts would wait for the held model forever
            await draining
        # Checked before anything else runs: the drain returns only once the interrupted run has ended, its end
        # recorded (a process exiting earlier leaves the session `running` until another replica's sweep).
        assert timed.engine.runs.admission.in_flight == 0
        # A drained process refuses every request but the health checks; this one lives on, to be read.
        timed.engine.runs.admission.draining = False
        session = await timed.session(user, sid)
        result = await running
        await hold.release()

        assert ready.status_code == 503 and ready.json()["error"]["code"] == "shutting_down"
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "shutting_down"
        assert types(result.events) == [*RUN_START, *STAGE_START, "STATE_DELTA", "STEP_FINISHED", "RUN_ERROR"]
        error_id = run_error_id(result.events[-1], "run_interrupted", INTERRUPTED)
        assert session["state_snapshot"] == {"status": "failed", "run_id": result.run_id, "error_id": error_id}
        assert (session["status"], session["error_id"]) == ("failed", error_id)
        rows = await timed.rows(user, sid)
        # The call the drain cut is billed with an estimated usage (the provider processed the prompt).
        assert [(r.seq, r.role, r.content) for r in rows] == [(1, "user", "hello"), (-1, "assistant", "")]
        assert rows[1].metadata.model_dump()["estimated"] is True
        assert len(timed.stub.requests) == 1


async def test_drain_lets_a_run_finish_within_the_grace_period_and_waits_for_it(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(shutdown_grace_seconds=60) as h:
        user = make_user()
        held = await h.held_run(user, "just in time")
        sid, hold, running = held.session_id, held.hold, held.result

        other = await h.new_session(user)
        draining = asyncio.create_task(h.engine.runs.drain())
        await asyncio.sleep(0)
        refused = await h.client.post(f"/v1/sessions/{other}/runs", headers=user.headers, json={"message": "more"})
        assert not draining.done()  # the drain waits for the run in flight, which waits for the held model
        await hold.release()
        result = await running
        async with asyncio.timeout(30):
            await draining
        h.engine.runs.admission.draining = False  # read what the drain left (a drained process would exit)

        assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        session = await h.session(user, sid)
        assert (session["status"], session["error_id"]) == ("completed", None)
        visible = await h.visible(user, sid)
        assert [(m["role"], m["content"]) for m in visible] == [("user", "hello"), ("assistant", "just in time")]


async def test_a_start_that_cannot_store_its_input_changes_nothing_and_names_one_error_id(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_start(self: RunStore, *args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(RunStore, "start", broken_start)
    user = make_user()
    sid = await h.new_session(user)

    response = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hello"})

    assert response.status_code == 500
    error_id = response.json()["error"]["error_id"]
    logged = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert [getattr(r, "error_id", None) for r in logged] == [error_id]
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("pending", None)
    assert await h.rows(user, sid) == []
    assert h.stub.requests == []
    assert h.engine.runs.admission.in_flight == 0  # the refused start gave its slot back
