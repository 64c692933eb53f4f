"""Regenerations' ranges (migrations/0012_regenerations.sql): owned like the session they belong to, well-formed,
and written only by the start of a regenerating run, over the reply after the last user message."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID, uuid4

import asyncpg
import pytest
from tests.conftest import User

from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata, UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.ledger.store import RunEndRequest
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate

_INSERT = """
INSERT INTO agent_chat_superseded (session_id, user_id, from_seq, to_seq, run_id) VALUES ($1, $2, $3, $4, $5)
"""
_RANGES = "SELECT from_seq, to_seq, run_id FROM agent_chat_superseded WHERE session_id = $1 AND user_id = $2"


async def _answered(engine: RuntimeEngine, user: User) -> tuple[UUID, UUID]:
    """A session with one answered turn (seq 1 user, seq 2 reply), and the id of the run that answered it."""
    session = await engine.sessions.create(user.ctx, SessionCreate())
    run_id = uuid4()
    turn = [NewMessage(role="user", content="hi", metadata=UserInputMetadata())]
    started = await engine.runs.store.start(user.ctx, session.id, run_id, turn)
    assert started is not None
    reply = [NewMessage(role="assistant", content="hello", metadata=AssistantOutputMetadata())]
    end = RunEndRequest(outcome="completed", run_status="completed", rows=reply)
    assert (await engine.runs.store.finish(user.ctx, started, end)).owned
    return session.id, run_id


async def test_a_range_belongs_to_its_sessions_owner(engine: RuntimeEngine, make_user: Callable[[], User]) -> None:
    owner, other = make_user(), make_user()
    sid, run_id = await _answered(engine, owner)
    with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_superseded_session"):
        await engine.pool.execute(_INSERT, sid, other.id, 2, 2, run_id)
    with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_superseded_run"):
        await engine.pool.execute(_INSERT, sid, owner.id, 2, 2, uuid4())
    assert await engine.pool.fetch(_RANGES, sid, owner.id) == []


@pytest.mark.parametrize(("from_seq", "to_seq"), [(3, 2), (1, 2), (-2, -1)])
async def test_a_range_is_a_range_of_replies(engine: RuntimeEngine, user: User, from_seq: int, to_seq: int) -> None:
    sid, run_id = await _answered(engine, user)
    with pytest.raises(asyncpg.CheckViolationError, match="ck_superseded_range"):
        await engine.pool.execute(_INSERT, sid, user.id, from_seq, to_seq, run_id)


async def test_the_start_of_a_regeneration_writes_the_range_and_a_deleted_session_takes_it(
    engine: RuntimeEngine, user: User
) -> None:
    sid, _ = await _answered(engine, user)
    run_id = uuid4()
    started = await engine.runs.store.start(user.ctx, sid, run_id, [], regenerate=True)
    assert started is not None and started.first_seq == 3
    assert [tuple(r) for r in await engine.pool.fetch(_RANGES, sid, user.id)] == [(2, 2, run_id)]
    listed = await engine.messages.list_visible(user.ctx, sid, limit=10, offset=0)
    assert [(m.seq, m.content) for m in listed.items] == [(1, "hi")]
    audit = await engine.messages.list_visible(user.ctx, sid, limit=10, offset=0, superseded=True)
    assert [(m.seq, m.content) for m in audit.items] == [(2, "hello")]

    await engine.sessions.delete(user.ctx, sid)
    assert await engine.pool.fetch(_RANGES, sid, user.id) == []


async def test_a_regeneration_without_a_user_message_starts_nothing(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    assert await engine.runs.store.start(user.ctx, session.id, uuid4(), [], regenerate=True) is None
    assert (await engine.sessions.get(user.ctx, session.id)).status == "pending"
    assert await engine.pool.fetch(_RANGES, session.id, user.id) == []
