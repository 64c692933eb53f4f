"""Runs that end outside the flow: interrupted by the drain after SHUTDOWN_GRACE_SECONDS (RUN_ERROR
`run_interrupted` in their stream, a failed session with the same error_id, the user's message kept), and a
start whose input cannot be stored (refused whole: nothing left behind, one error_id)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    MakeHarness,
    intent_direct,
    run_error_id,
    types,
    wait_for_model_call,
    warm_up,
)

from agent_runtime.engine.runs.store import RunStore

INTERRUPTED = "the server shut down before the run finished"


async def test_drain_interrupts_a_run_past_the_grace_period_and_refuses_new_ones(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    await warm_up(h, make_user())  # CrewAI and LiteLLM loaded: the run below waits only for the model
    async with make_harness(shutdown_grace_seconds=0.3) as timed:
        user = make_user()
        sid = await timed.new_session(user)
        timed.stub.enqueue(intent_direct("far too late", delay_seconds=4.0))
        running = asyncio.create_task(timed.run(user, sid, "hello"))
        await wait_for_model_call(timed.stub)

        started = time.monotonic()
        draining = asyncio.create_task(timed.engine.runs.drain())
        await asyncio.sleep(0)  # the drain has begun: new work is refused from now on
        ready = await timed.client.get("/health/ready")
        refused = await timed.client.post(
            f"/v1/sessions/{await timed.new_session(user)}/runs", headers=user.headers, json={"message": "more"}
        )
        result = await running
        await draining
        assert time.monotonic() - started < 2.0  # the grace period, then the interrupt: not the model's 4 s

        assert ready.status_code == 503 and ready.json()["error"]["code"] == "shutting_down"
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "shutting_down"
        assert types(result.events) == ["RUN_STARTED", "STEP_STARTED", "STEP_FINISHED", "RUN_ERROR"]
        error_id = run_error_id(result.events[-1], "run_interrupted", INTERRUPTED)
        session = await timed.session(user, sid)
        assert session["state_snapshot"] == {"status": "failed", "run_id": result.run_id, "error_id": error_id}
        assert (session["status"], session["error_id"]) == ("failed", error_id)
        rows = await timed.rows(user, sid)
        assert [(r.seq, r.role, r.content) for r in rows] == [(1, "user", "hello")]


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
