"""The database's own rules (migrations/0001_initial.sql), met as any client of the database would meet them.

The engine keeps these rules too; the constraints and triggers are the backstop for a bug in it, a
second writer or a hand-run UPDATE, so each rule is tried here with a statement the engine would never send.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID, uuid4

import asyncpg
import pytest
from tests.conftest import User

from agent_runtime.engine.messages.metadata import UserInputMetadata
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate, SessionStatus

STATUSES: list[SessionStatus] = ["pending", "running", "completed", "failed"]
ALLOWED = {
    ("pending", "running"),
    ("running", "completed"),
    ("running", "failed"),
    ("completed", "running"),
    ("failed", "running"),
}


async def _session_in(engine: RuntimeEngine, user: User, status: SessionStatus) -> UUID:
    """A session brought to `status` through the engine's own methods."""
    session = await engine.sessions.create(user.ctx, SessionCreate())
    if status == "pending":
        return session.id
    run_id = uuid4()
    await engine.sessions.start_run(user.ctx, session.id, run_id)
    if status != "running":
        error_id = "e-1" if status == "failed" else None
        assert await engine.sessions.finish_run(user.ctx, session.id, run_id, status, error_id=error_id)
    assert (await engine.sessions.get(user.ctx, session.id)).status == status
    return session.id


# Moves the session to $2 with everything else consistent (snapshot, run, error id), so that only the
# transition itself can be refused.
_MOVE = """
UPDATE agent_chat_sessions
   SET status = $2, state_snapshot = state_snapshot || jsonb_build_object('status', $2::text),
       error_id = CASE WHEN $2 = 'failed' THEN 'e-2' ELSE error_id END,
       run_id = COALESCE(run_id, gen_random_uuid()), run_started_at = COALESCE(run_started_at, now())
 WHERE id = $1
"""


async def test_session_status_moves_only_along_the_machine(engine: RuntimeEngine, user: User) -> None:
    outcomes: dict[tuple[str, str], str] = {}
    for old in STATUSES:
        for new in STATUSES:
            if old == new:
                continue
            sid = await _session_in(engine, user, old)
            try:
                await engine.pool.execute(_MOVE, sid, new)
                outcomes[(old, new)] = "allowed"
            except asyncpg.CheckViolationError as exc:
                outcomes[(old, new)] = str(exc)
    assert outcomes == {
        (old, new): "allowed" if (old, new) in ALLOWED else f"invalid session status transition {old} -> {new}"
        for old in STATUSES
        for new in STATUSES
        if old != new
    }


@pytest.mark.parametrize(
    ("column", "value"),
    [
        pytest.param("user_id", uuid4(), id="owner"),
        pytest.param("billing_country_snapshot", "US", id="billing-country"),
    ],
)
async def test_a_sessions_owner_and_billing_country_are_frozen(
    engine: RuntimeEngine, user: User, column: str, value: object
) -> None:
    # A session without messages: no foreign key stands in the way, only the trigger.
    sid = await _session_in(engine, user, "pending")
    with pytest.raises(asyncpg.CheckViolationError, match="billing fields and owner of a session are frozen"):
        await engine.pool.execute(f"UPDATE agent_chat_sessions SET {column} = $2 WHERE id = $1", sid, value)
    session = await engine.sessions.get(user.ctx, sid)
    assert session.billing_country_snapshot == "CN"


async def test_a_failed_run_without_an_error_id_is_refused(
    engine: RuntimeEngine, make_user: Callable[[], User]
) -> None:
    user = make_user()
    run_id = uuid4()
    session = await engine.sessions.create(user.ctx, SessionCreate())
    await engine.sessions.start_run(user.ctx, session.id, run_id)
    with pytest.raises(asyncpg.CheckViolationError, match="chk_failed_has_error"):
        await engine.sessions.finish_run(user.ctx, session.id, run_id, "failed", error_id=None)
    assert (await engine.sessions.get(user.ctx, session.id)).status == "running"


async def test_deleting_a_session_deletes_its_messages(engine: RuntimeEngine, user: User) -> None:
    sid = await _session_in(engine, user, "completed")
    await engine.messages.append(
        user.ctx, sid, [NewMessage(role="user", content="forget me", metadata=UserInputMetadata())]
    )
    await engine.sessions.delete(user.ctx, sid)
    assert await engine.messages.list_all(user.ctx, sid) == []
