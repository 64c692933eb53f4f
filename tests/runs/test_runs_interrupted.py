"""Runs that end outside the flow: cancelled by shutdown after SHUTDOWN_GRACE_SECONDS (recorded as failed with the
error_id its RUN_ERROR names, the user's message kept), or unable to store their input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    RUN_START,
    STAGE_START,
    Harness,
    MakeHarness,
    intent_direct,
    run_error_id,
    types,
    wait_for_model_call,
    warm_up,
)

from agent_runtime.engine.messages.store import MessageStore


async def test_shutdown_cancels_a_run_past_the_grace_period_and_records_it_failed(
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
        await timed.engine.runs.aclose()
        assert time.monotonic() - started < 2.0  # the grace period, then the cancel: not the model's 4 s
        result = await running

        assert types(result.events) == [*RUN_START, *STAGE_START, "STATE_DELTA", "STEP_FINISHED", "RUN_ERROR"]
        error = result.events[-1]
        message = "the run was cancelled (server shutting down)"
        error_id = run_error_id(error, "run_cancelled", message)
        session = await timed.session(user, sid)
        assert session["state_snapshot"] == {"status": "failed", "run_id": result.run_id, "error_id": error_id}
        assert (session["status"], session["error_id"]) == ("failed", error_id)
        rows = await timed.rows(user, sid)
        assert [(r.seq, r.role, r.content) for r in rows] == [(1, "user", "hello")]


async def test_a_failure_to_store_the_input_leaves_a_failed_session_whose_error_id_is_logged(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_append(self: MessageStore, *args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(MessageStore, "append", broken_append)
    user = make_user()
    sid = await h.new_session(user)

    result = await h.run(user, sid, "hello")

    assert result.status == 500
    session = await h.session(user, sid)
    assert session["status"] == "failed"
    logged = [r for r in caplog.records if r.getMessage() == "could not store the run's messages"]
    assert [getattr(r, "error_id", None) for r in logged] == [session["error_id"]]
    assert h.stub.requests == []
