"""A database failure while a run records its end never leaves the session `running`: the write is retried,
and if the database stays away the lease expires and the sweep fails the run as `run_lost`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, intent_direct, run_error_id, types, warm_up
from tests.support.serve import poll_until

from agent_runtime.engine.runs.ledger.store import RunEnd, RunEndRequest, RunStore


def failing_finish(monkeypatch: pytest.MonkeyPatch, failures: int | None) -> list[str]:
    """RunStore.finish raises a dropped-connection error `failures` times (None: always); returns the outcomes
    it was asked to record, failed attempts included."""
    real = RunStore.finish
    asked: list[str] = []

    async def finish(self: RunStore, ctx: Any, started: Any, end: RunEndRequest) -> RunEnd:
        asked.append(end.run_status)
        if failures is None or len(asked) <= failures:
            raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        return await real(self, ctx, started, end)

    monkeypatch.setattr(RunStore, "finish", finish)
    return asked


async def test_a_dropped_connection_while_finishing_is_retried_and_the_run_completes(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    asked = failing_finish(monkeypatch, failures=2)
    h.stub.enqueue(intent_direct("all good"))

    result = await h.run(user, sid, "hello")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    assert asked == ["completed"] * 3
    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("completed", None)
    assert [(m["role"], m["content"]) for m in await h.visible(user, sid)] == [
        ("user", "hello"),
        ("assistant", "all good"),
    ]


async def test_a_database_that_stays_away_leaves_the_run_to_the_sweep_not_running_forever(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    await warm_up(h, make_user())
    async with make_harness(run_lease_seconds=1.0, run_heartbeat_seconds=0.5, run_sweep_seconds=0.2) as short:
        user = make_user()
        sid = await short.new_session(user)
        asked = failing_finish(monkeypatch, failures=None)
        short.stub.enqueue(intent_direct("never stored"))

        result = await short.run(user, sid, "hello")

        # Both the result and then the failure were tried for about a second each, then given up on: the client
        # hears the cause, not an internal error.
        assert set(asked) == {"completed", "failed"} and len(asked) > 2, asked
        run_error_id(result.events[-1], "database_unavailable", "the database became unreachable during the run")
        monkeypatch.undo()
        session = await poll_until(lambda: short.session(user, sid), lambda s: s["status"] != "running", within=10)
        assert session["status"] == "failed"
        runs = (await short.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()
        assert [(r["id"], r["status"], r["error_code"], r["error_id"]) for r in runs["items"]] == [
            (result.run_id, "failed", "run_lost", session["error_id"])
        ]
        assert [(m["role"], m["content"]) for m in await short.visible(user, sid)] == [("user", "hello")]
        short.stub.enqueue(intent_direct("back again"))
        again = await short.run(user, sid, "once more")
        assert types(again.events)[-1] == "RUN_FINISHED", again.body
