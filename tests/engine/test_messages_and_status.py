from __future__ import annotations

import asyncio
from decimal import Decimal
from uuid import uuid4

import asyncpg
import pytest
from tests.conftest import User
from tests.support.rows import stored_rows

from agent_runtime.engine.conversation.metadata import AuditMetadata, ToolCallMetadata, ToolCallSpec, UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import ConflictError, NotFoundError
from agent_runtime.engine.runs.ledger.store import RunEndRequest
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate


async def test_twenty_concurrent_appends_all_land(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    messages = [NewMessage(role="user", content=f"m{i}", metadata=UserInputMetadata()) for i in range(20)]
    batches = await asyncio.gather(*(engine.messages.append(user.ctx, session.id, [m]) for m in messages))
    assert sorted(s.seq for batch in batches for s in batch) == list(range(1, 21))
    rows = await engine.pool.fetch("SELECT seq, content FROM agent_chat_messages WHERE session_id = $1", session.id)
    assert len(rows) == 20 and {r["content"] for r in rows} == {f"m{i}" for i in range(20)}


async def test_audit_rows_count_down(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    audits = [NewMessage(role="assistant", content="{}", metadata=AuditMetadata(stage="intent")) for _ in range(3)]
    stored = await engine.messages.append(user.ctx, session.id, audits)
    assert [s.seq for s in stored] == [-1, -2, -3]


async def test_append_to_foreign_session_is_404(engine: RuntimeEngine, make_user) -> None:  # type: ignore[no-untyped-def]
    owner, intruder = make_user(), make_user()
    session = await engine.sessions.create(owner.ctx, SessionCreate())
    with pytest.raises(NotFoundError):
        await engine.messages.append(intruder.ctx, session.id, [NewMessage(role="user", metadata=UserInputMetadata())])


async def test_duplicate_message_id_is_conflict(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    message = NewMessage(role="user", content="x", metadata=UserInputMetadata(), message_id="client-1")
    await engine.messages.append(user.ctx, session.id, [message])
    with pytest.raises(ConflictError):
        await engine.messages.append(user.ctx, session.id, [message])
    assert [m.message_id for m in await stored_rows(engine.pool, user.ctx, session.id)] == ["client-1"]


def test_metadata_is_validated_before_insert() -> None:
    with pytest.raises(ValueError, match="tool_calls"):
        NewMessage.model_validate({"role": "assistant", "metadata": {"kind": "tool_call", "tool_calls": []}})
    with pytest.raises(ValueError):
        NewMessage.model_validate({"role": "user", "metadata": {"kind": "nonsense"}})
    ok = NewMessage(
        role="assistant",
        metadata=ToolCallMetadata(tool_calls=[ToolCallSpec(id="c1", name="calculator", arguments='{"e":"1+1"}')]),
    )
    assert ok.metadata.kind == "tool_call"


async def test_title_from_first_user_message_never_overwritten(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    long_text = "  line one\nline two " + "x" * 100
    await engine.messages.append(
        user.ctx, session.id, [NewMessage(role="user", content=long_text, metadata=UserInputMetadata())]
    )
    await engine.messages.append(
        user.ctx, session.id, [NewMessage(role="user", content="other", metadata=UserInputMetadata())]
    )
    title = (await engine.sessions.get(user.ctx, session.id)).title
    assert title == ("line one line two " + "x" * 100)[:64]
    blank = await engine.sessions.create(user.ctx, SessionCreate())
    await engine.messages.append(
        user.ctx, blank.id, [NewMessage(role="user", content=" \n ", metadata=UserInputMetadata())]
    )
    assert (await engine.sessions.get(user.ctx, blank.id)).title == "新会话"


async def test_database_rejects_wrong_currency_and_duplicate_seq(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    insert = """
        INSERT INTO agent_chat_messages (id, session_id, user_id, message_id, seq, role, content, metadata, currency)
        VALUES ($1, $2, $3, $4, $5, 'user', 'x', '{"kind": "user_input"}', $6)
    """
    with pytest.raises(asyncpg.CheckViolationError, match="does not match session currency"):
        await engine.pool.execute(insert, uuid4(), session.id, user.id, "a", 1, "USD")
    await engine.pool.execute(insert, uuid4(), session.id, user.id, "b", 1, "CNY")
    with pytest.raises(asyncpg.UniqueViolationError, match="uq_messages_session_seq"):
        await engine.pool.execute(insert, uuid4(), session.id, user.id, "c", 1, "CNY")
    with pytest.raises(asyncpg.CheckViolationError):
        await engine.pool.execute(insert, uuid4(), session.id, user.id, "d", 0, "CNY")
    with pytest.raises(asyncpg.CheckViolationError, match="chk_audit_seq"):
        await engine.pool.execute(insert, uuid4(), session.id, user.id, "e", -5, "CNY")
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await engine.pool.execute(insert, uuid4(), session.id, uuid4(), "f", 7, "CNY")
    with pytest.raises(asyncpg.CheckViolationError, match=r"chk_billing_currency|frozen"):
        await engine.pool.execute("UPDATE agent_chat_sessions SET billing_currency = 'USD' WHERE id = $1", session.id)


def _user_turn(text: str = "hi") -> list[NewMessage]:
    return [NewMessage(role="user", content=text, metadata=UserInputMetadata())]


async def test_status_machine(engine: RuntimeEngine, user: User) -> None:
    store = engine.runs.store
    session = await engine.sessions.create(user.ctx, SessionCreate())
    run1 = uuid4()
    started = await store.start(user.ctx, session.id, run1, _user_turn())
    assert started is not None
    running = started.session
    assert (running.status, running.state_snapshot.status, running.state_snapshot.run_id) == (
        "running",
        "running",
        str(run1),
    )
    failed_end = RunEndRequest(
        outcome="failed", run_status="failed", rows=[], error_code="run_timeout", error_id="err-1"
    )
    end = await store.finish(user.ctx, started, failed_end)
    assert end.owned
    failed = await engine.sessions.get(user.ctx, session.id)
    assert (failed.status, failed.state_snapshot.status, failed.error_id, failed.state_snapshot.error_id) == (
        "failed",
        "failed",
        "err-1",
        "err-1",
    )
    run2 = uuid4()
    again = await store.start(user.ctx, session.id, run2, _user_turn("again"))
    assert again is not None
    assert (again.session.status, again.session.error_id) == ("running", None)
    completed = RunEndRequest(outcome="completed", run_status="completed", rows=[])
    assert not (await store.finish(user.ctx, started, completed)).owned  # stale run id
    assert (await store.finish(user.ctx, again, completed)).owned
    done = await engine.sessions.get(user.ctx, session.id)
    assert (done.status, done.state_snapshot.status) == ("completed", "completed")
    runs = await engine.pool.fetch(
        "SELECT id, status, error_code, error_id FROM agent_runs WHERE session_id = $1 ORDER BY created_at",
        session.id,
    )
    assert [tuple(r) for r in runs] == [(run1, "failed", "run_timeout", "err-1"), (run2, "completed", None, None)]
    with pytest.raises(asyncpg.CheckViolationError, match="invalid session status transition"):
        await engine.pool.execute(
            "UPDATE agent_chat_sessions SET status = 'pending', state_snapshot = '{\"status\":\"pending\"}'"
            " WHERE id = $1",
            session.id,
        )
    with pytest.raises(asyncpg.CheckViolationError, match="chk_snapshot_status"):
        await engine.pool.execute(
            'UPDATE agent_chat_sessions SET state_snapshot = \'{"status":"failed"}\' WHERE id = $1', session.id
        )


async def test_concurrent_run_starts_exactly_one_wins(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    results = await asyncio.gather(
        *(engine.runs.store.start(user.ctx, session.id, uuid4(), _user_turn(f"m{i}")) for i in range(2))
    )
    assert sorted(r is None for r in results) == [False, True]
    rows = await engine.pool.fetch("SELECT content FROM agent_chat_messages WHERE session_id = $1", session.id)
    assert len(rows) == 1  # the losing start stored nothing


async def test_start_run_on_foreign_session_is_404(engine: RuntimeEngine, make_user) -> None:  # type: ignore[no-untyped-def]
    owner, intruder = make_user(), make_user()
    session = await engine.sessions.create(owner.ctx, SessionCreate())
    with pytest.raises(NotFoundError):
        await engine.runs.store.start(intruder.ctx, session.id, uuid4(), _user_turn())
    assert (await engine.sessions.get(owner.ctx, session.id)).status == "pending"
    assert await engine.pool.fetchval("SELECT count(*) FROM agent_runs WHERE session_id = $1", session.id) == 0


async def test_a_run_whose_lease_expired_is_swept_as_lost_and_the_session_runs_again(
    engine: RuntimeEngine, user: User
) -> None:
    store = engine.runs.store
    session = await engine.sessions.create(user.ctx, SessionCreate())
    started = await store.start(user.ctx, session.id, uuid4(), _user_turn())
    assert started is not None
    assert await store.start(user.ctx, session.id, uuid4(), _user_turn("blocked")) is None
    # The sweep is every user's (the shared test database may hold other tests' expired runs): this session's only.
    assert [r for r in await store.sweep() if r.session_id == session.id] == []  # the lease is alive
    await engine.pool.execute(
        "UPDATE agent_chat_sessions SET lease_expires_at = now() - interval '1 second' WHERE id = $1", session.id
    )
    lost = [r for r in await store.sweep() if r.session_id == session.id]
    assert [(r.session_id, r.run_id) for r in lost] == [(session.id, started.run_id)]
    swept = await engine.sessions.get(user.ctx, session.id)
    assert (swept.status, swept.error_id) == ("failed", lost[0].error_id)
    run = await engine.pool.fetchrow(
        "SELECT status, error_code, error_id FROM agent_runs WHERE id = $1", started.run_id
    )
    assert tuple(run) == ("failed", "run_lost", lost[0].error_id)
    assert await store.start(user.ctx, session.id, uuid4(), _user_turn("again")) is not None


async def test_cost_is_numeric_in_db(engine: RuntimeEngine, user: User) -> None:
    """Costs are stored as numeric(20,10) and summed by the database exactly: ten calls of 0.1 CNY are
    1.0000000000, and a cost with all 20 digits reads back unchanged (a binary float gives neither)."""
    session = await engine.sessions.create(user.ctx, SessionCreate())
    calls = [
        NewMessage(
            role="assistant",
            content="{}",
            cost=Decimal("0.1"),
            metadata=AuditMetadata(stage="intent", cost_source="custom_pricing"),
        )
        for _ in range(10)
    ]
    big = NewMessage(
        role="assistant",
        content="{}",
        cost=Decimal("1234567890.0123456789"),
        metadata=AuditMetadata(stage="execution", cost_source="custom_pricing"),
    )
    await engine.messages.append(user.ctx, session.id, [*calls, big])
    stored = await stored_rows(engine.pool, user.ctx, session.id)
    assert sorted(m.cost for m in stored) == [Decimal("0.1000000000")] * 10 + [Decimal("1234567890.0123456789")]
    usage = await engine.usage.for_session(user.ctx, session.id)
    assert [(s.stage, s.cost) for s in usage.by_stage] == [
        ("execution", Decimal("1234567890.0123456789")),
        ("intent", Decimal("1.0000000000")),
    ]
    assert usage.total.cost == Decimal("1234567891.0123456789")


async def test_batches_get_consecutive_seqs_in_order(engine: RuntimeEngine, user: User) -> None:
    session = await engine.sessions.create(user.ctx, SessionCreate())
    batch = [NewMessage(role="user", content=f"b{i}", metadata=UserInputMetadata()) for i in range(3)]
    audits = [NewMessage(role="assistant", content="{}", metadata=AuditMetadata(stage="intent")) for _ in range(2)]
    first = await engine.messages.append(user.ctx, session.id, [batch[0], audits[0], batch[1], audits[1], batch[2]])
    second = await engine.messages.append(
        user.ctx, session.id, [NewMessage(role="user", content="next", metadata=UserInputMetadata())]
    )
    assert [(m.seq, m.content) for m in [*first, *second]] == [
        (1, "b0"),
        (-1, "{}"),
        (2, "b1"),
        (-2, "{}"),
        (3, "b2"),
        (4, "next"),
    ]
