"""The database's own rules (migrations/0001_initial.sql), met as any client of the database would meet them.

The engine keeps these rules too; the constraints and triggers are the backstop for a bug in it, a
second writer or a hand-run UPDATE, so each rule is tried here with a statement the engine would never send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from uuid import UUID, uuid4

import asyncpg
import pytest
from tests.conftest import User
from tests.support.rows import stored_rows
from tests.support.serve import poll_until

from agent_runtime.db.pool import create_pool
from agent_runtime.engine.conversation.metadata import UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import TooManyRunsError, TooManySessionsError
from agent_runtime.engine.runs.agui.mapper import log_endings
from agent_runtime.engine.runs.ledger.store import RunEndRequest, RunStore
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate, SessionStatus
from agent_runtime.engine.sessions.repository import INSERT_SQL
from agent_runtime.engine.sessions.service import SessionService
from agent_runtime.settings import UserQuotas

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
    turn = [NewMessage(role="user", content="hi", metadata=UserInputMetadata())]
    started = await engine.runs.store.start(user.ctx, session.id, uuid4(), turn)
    assert started is not None
    if status != "running":
        failed = {"error_code": "run_timeout", "error_id": "e-1"} if status == "failed" else {}
        end = RunEndRequest(outcome=status, run_status=status, rows=[], **failed)
        assert (await engine.runs.store.finish(user.ctx, started, end)).owned
    assert (await engine.sessions.get(user.ctx, session.id)).status == status
    return session.id


# Moves the session to $2 with everything else consistent (snapshot, run, lease, error id), so that only
# the transition itself can be refused.
_MOVE = """
UPDATE agent_chat_sessions
   SET status = $2, state_snapshot = state_snapshot || jsonb_build_object('status', $2::text),
       error_id = CASE WHEN $2 = 'failed' THEN 'e-2' ELSE error_id END,
       run_id = COALESCE(run_id, gen_random_uuid()), run_started_at = COALESCE(run_started_at, now()),
       lease_owner = CASE WHEN $2 = 'running' THEN 'test' END,
       lease_expires_at = CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END
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


async def test_a_failed_session_without_an_error_id_is_refused(engine: RuntimeEngine, user: User) -> None:
    sid = await _session_in(engine, user, "running")
    with pytest.raises(asyncpg.CheckViolationError, match="chk_failed_has_error"):
        await engine.pool.execute(
            """
            UPDATE agent_chat_sessions
               SET status = 'failed', state_snapshot = state_snapshot || '{"status": "failed"}',
                   lease_owner = NULL, lease_expires_at = NULL
             WHERE id = $1
            """,
            sid,
        )
    assert (await engine.sessions.get(user.ctx, sid)).status == "running"


async def test_deleting_a_session_deletes_its_messages(engine: RuntimeEngine, user: User) -> None:
    sid = await _session_in(engine, user, "completed")
    await engine.messages.append(
        user.ctx, sid, [NewMessage(role="user", content="forget me", metadata=UserInputMetadata())]
    )
    await engine.sessions.delete(user.ctx, sid)
    assert await stored_rows(engine.pool, user.ctx, sid) == []


async def test_a_user_has_at_most_the_configured_runs_in_progress(
    engine: RuntimeEngine, make_user: Callable[[], User], database_url: str
) -> None:
    """The per-user limit is the database's (trigger enforce_user_run_limit), read from a setting each
    replica puts on its connections; here a pool of its own with a limit of 2."""
    pool = await create_pool(database_url, min_size=1, max_size=2, quotas=UserQuotas(max_runs_per_user=2))
    try:
        store = RunStore(pool, owner="limit-test", lease_seconds=30, endings=log_endings())
        user, other = make_user(), make_user()
        turn = [NewMessage(role="user", content="hi", metadata=UserInputMetadata())]
        sessions = [(await engine.sessions.create(user.ctx, SessionCreate())).id for _ in range(3)]
        for sid in sessions[:2]:
            assert await store.start(user.ctx, sid, uuid4(), turn) is not None
        with pytest.raises(TooManyRunsError):
            await store.start(user.ctx, sessions[2], uuid4(), turn)
        assert (await engine.sessions.get(user.ctx, sessions[2])).status == "pending"
        elsewhere = await engine.sessions.create(other.ctx, SessionCreate())
        assert await store.start(other.ctx, elsewhere.id, uuid4(), turn) is not None
    finally:
        await pool.close()


async def test_a_limit_set_to_zero_on_the_connection_is_no_limit(
    engine: RuntimeEngine, make_user: Callable[[], User], database_url: str
) -> None:
    """0 = no limit in the database too (migrations/0008): the service never sends a 0 (settings map it to
    unset), but a session that sets one itself must not be refused everything."""
    zero = UserQuotas(
        max_runs_per_user=0,
        max_runs_per_minute=0,
        max_sessions_per_user=0,
        daily_budget_cny=Decimal(0),
        monthly_budget_cny=Decimal(0),
    )
    pool = await create_pool(database_url, min_size=1, max_size=2, quotas=zero)
    try:
        assert await pool.fetchval("SELECT current_setting('agent_runtime.max_runs_per_user')") == "0"
        store = RunStore(pool, owner="zero-test", lease_seconds=30, endings=log_endings())
        sessions = SessionService(pool, engine.profiles, model="zero-test")
        user = make_user()
        turn = [NewMessage(role="user", content="hi", metadata=UserInputMetadata())]
        for _ in range(5):
            created = await sessions.create(user.ctx, SessionCreate())
            assert await store.start(user.ctx, created.id, uuid4(), turn) is not None
    finally:
        await pool.close()


async def _waiting_on_a_lock(engine: RuntimeEngine, statement: str) -> int:
    count: int = await engine.pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock' AND query = $1",
        statement,
    )
    return count


async def test_a_session_created_beside_an_uncommitted_one_waits_for_it_and_is_refused(
    engine: RuntimeEngine, user: User, database_url: str
) -> None:
    """MAX_SESSIONS_PER_USER under a race, made deterministic: one transaction has inserted the user's only
    allowed session and not committed; a second creation must wait for it (the per-user gate row) and then
    count it. Without the gate the second one counts 0 and both commit (a user over the limit)."""
    pool = await create_pool(database_url, min_size=2, max_size=2, quotas=UserQuotas(max_sessions_per_user=1))
    try:
        sessions = SessionService(pool, engine.profiles, model="limit-test")
        async with pool.acquire() as first, first.transaction():
            await first.execute(INSERT_SQL, uuid4(), user.ctx.user_id, None, "CN", "limit-test")
            second = asyncio.create_task(sessions.create(user.ctx, SessionCreate()))
            # Until the second one waits on a lock (the gate) or, without the gate, has already committed.
            await poll_until(
                lambda: _waiting_on_a_lock(engine, INSERT_SQL), lambda n: n > 0 or second.done(), within=10
            )
            assert not second.done(), "the second creation did not wait for the uncommitted first one"
        with pytest.raises(TooManySessionsError):
            await second
        assert len((await engine.sessions.list(user.ctx, limit=10, offset=0)).items) == 1
    finally:
        await pool.close()
