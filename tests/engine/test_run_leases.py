"""Leases at the engine level: a lease lasts RUN_LEASE_SECONDS and no longer, and a run the sweep takes over
ends its event log with RUN_ERROR `run_lost`, so that whoever resumes its stream gets an end."""

from __future__ import annotations

import asyncio
import json
from typing import Literal
from uuid import uuid4

import pytest
from tests.conftest import User

from agent_runtime.engine.conversation.metadata import UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.agui.mapper import log_endings
from agent_runtime.engine.runs.events.repository import LOST_RUN_SEQ
from agent_runtime.engine.runs.ledger.store import RunEndRequest, RunStore
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate


def _user_turn(text: str = "hi") -> list[NewMessage]:
    return [NewMessage(role="user", content=text, metadata=UserInputMetadata())]


async def test_a_lease_expires_after_run_lease_seconds_and_the_sweep_takes_the_run_over(
    engine: RuntimeEngine, user: User
) -> None:
    # A store of its own with a short lease (settings allow at least 1 s); nothing renews it.
    short = RunStore(engine.pool, owner=f"test-short-lease-{uuid4().hex[:8]}", lease_seconds=0.5, endings=log_endings())
    session = await engine.sessions.create(user.ctx, SessionCreate())
    started = await short.start(user.ctx, session.id, uuid4(), _user_turn())
    assert started is not None
    await asyncio.sleep(1.5)  # the database's clock, not ours, decides: 1.5 s is past a 0.5 s lease whatever the load

    await short.sweep()

    # Taken over as lost, by this sweep or by the periodic sweep of an app another test left running (any
    # process's sweep takes every expired lease: which one did it is not the point).
    runs = await engine.runs.store.list_for_session(user.ctx, session.id, limit=10, offset=0)
    assert [(r.id, r.status, r.error_code) for r in runs.items] == [(started.run_id, "failed", "run_lost")]


async def test_a_swept_runs_stream_ends_with_run_lost_for_whoever_resumes_it(engine: RuntimeEngine, user: User) -> None:
    store = engine.runs.store
    session = await engine.sessions.create(user.ctx, SessionCreate())
    started = await store.start(user.ctx, session.id, uuid4(), _user_turn())
    assert started is not None
    await engine.pool.execute(
        "UPDATE agent_chat_sessions SET lease_expires_at = now() - interval '1 second' WHERE id = $1", session.id
    )
    (lost,) = [r for r in await store.sweep() if r.session_id == session.id]

    async with asyncio.timeout(10):  # a log without an end would be followed forever
        events = [e async for e in await engine.runs.follow(user.ctx, session.id, started.run_id, after=0)]

    assert [(e.seq, json.loads(e.data), e.terminal) for e in events] == [
        (
            LOST_RUN_SEQ,
            {
                "type": "RUN_ERROR",
                "code": "run_lost",
                "message": f"the run was lost: its server stopped (error_id {lost.error_id})",
            },
            True,
        )
    ]


@pytest.mark.parametrize(
    ("outcome", "error_code"),
    [
        ("completed", None),
        ("failed", "llm_timeout"),
        # The repair fills the mapper's RUN_ERROR with the stored code: any text stays valid JSON.
        ("failed", 'a "quoted" code \\ with a backslash'),
    ],
)
async def test_a_finished_run_whose_log_has_no_end_gets_the_end_its_run_row_says(
    engine: RuntimeEngine, user: User, outcome: Literal["completed", "failed"], error_code: str | None
) -> None:
    store = engine.runs.store
    session = await engine.sessions.create(user.ctx, SessionCreate())
    started = await store.start(user.ctx, session.id, uuid4(), _user_turn())
    assert started is not None
    error_id = uuid4().hex if outcome == "failed" else None
    end = RunEndRequest(outcome=outcome, run_status=outcome, rows=[], error_code=error_code, error_id=error_id)
    await store.finish(user.ctx, started, end)  # and its process died before writing its log's terminal event

    await store.repair_logs(grace_seconds=0)

    async with asyncio.timeout(10):
        events = [e async for e in await engine.runs.follow(user.ctx, session.id, started.run_id, after=0)]
    if outcome == "failed":
        ending = {"type": "RUN_ERROR", "code": error_code, "message": f"the run failed (error_id {error_id})"}
    else:
        ending = {"type": "RUN_FINISHED", "threadId": str(session.id), "runId": str(started.run_id)}
    assert [(e.seq, json.loads(e.data), e.terminal) for e in events] == [(LOST_RUN_SEQ, ending, True)]
