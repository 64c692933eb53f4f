"""Every engine method on user-owned data answers for its caller only.

Another user's session reads exactly like a missing one (NotFoundError, same message), cannot be changed
through any method, and its rows never appear in the caller's lists or sums. The tests seed the other
user's data so that a missing owner filter would show (they do not rely on which row sorts first).
These run on the engine (no app, no CrewAI import), so the mutation check can run them in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import asyncpg
from tests.conftest import User

from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata, UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import NotFoundError
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.service import ProfileUpdate
from agent_runtime.engine.runs.ledger.store import RunEndRequest
from agent_runtime.engine.runs.request.pending import PendingStore
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate, SessionUpdate


def _turn(question: str, answer: str, cost: str) -> list[NewMessage]:
    return [
        NewMessage(role="user", content=question, metadata=UserInputMetadata()),
        NewMessage(
            role="assistant",
            content=answer,
            input_tokens=100,
            output_tokens=10,
            cost=Decimal(cost),
            metadata=AssistantOutputMetadata(stage="intent", cost_source="custom_pricing", cached_tokens=0),
        ),
    ]


async def _session_with_a_turn(engine: RuntimeEngine, user: User, title: str, cost: str) -> UUID:
    session = await engine.sessions.create(user.ctx, SessionCreate(title=title))
    await engine.messages.append(user.ctx, session.id, _turn(f"{title}?", f"{title}!", cost))
    return session.id


async def test_another_users_session_reads_as_missing_through_every_method(
    engine: RuntimeEngine, make_user: Callable[[], User]
) -> None:
    owner, intruder = make_user(), make_user()
    sid = await _session_with_a_turn(engine, owner, "secret", "0.5")
    run = await engine.runs.store.start(owner.ctx, sid, uuid4(), _turn("run", "-", "0")[:1])
    assert run is not None
    completed = RunEndRequest(outcome="completed", run_status="completed", rows=[])
    assert (await engine.runs.store.finish(owner.ctx, run, completed)).owned

    async def owners_view() -> tuple[object, ...]:
        return (
            await engine.sessions.get(owner.ctx, sid),
            await engine.messages.list_visible(owner.ctx, sid, limit=20, offset=0),
            await engine.usage.for_session(owner.ctx, sid),
            await engine.runs.store.list_for_session(owner.ctx, sid, limit=20, offset=0),
        )

    before = await owners_view()
    ctx = intruder.ctx
    attempts: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: engine.sessions.get(ctx, sid),
        "agui_thread": lambda: PendingStore(engine.pool).load(ctx, sid, ["m"]),
        "update": lambda: engine.sessions.update(ctx, sid, SessionUpdate(title="pwned")),
        "delete": lambda: engine.sessions.delete(ctx, sid),
        "start_run": lambda: engine.runs.store.start(ctx, sid, uuid4(), _turn("run", "-", "0")[:1]),
        "runs": lambda: engine.runs.store.list_for_session(ctx, sid, limit=20, offset=0),
        "append": lambda: engine.messages.append(ctx, sid, _turn("inject", "injected", "9")),
        "list_visible": lambda: engine.messages.list_visible(ctx, sid, limit=20, offset=0),
        "usage": lambda: engine.usage.for_session(ctx, sid),
    }
    outcomes: dict[str, object] = {}
    for name, attempt in attempts.items():
        try:
            outcomes[name] = await attempt()
        except NotFoundError as exc:
            outcomes[name] = exc.message
    assert outcomes == dict.fromkeys(attempts, f"session {sid} not found")
    assert await owners_view() == before
    # The AG-UI snapshot read raises no ownership error: it must come back empty, not with the owner's rows.
    owners_rows = await engine.messages.latest_visible(owner.ctx, sid, limit=100)
    assert [m.content for m in owners_rows] == ["secret?", "secret!", "run"]
    assert await engine.messages.latest_visible(ctx, sid, limit=100) == []


async def test_lists_and_sums_hold_only_the_callers_rows(engine: RuntimeEngine, make_user: Callable[[], User]) -> None:
    user, other = make_user(), make_user()
    # The other user's session is created last and costs most: it would sort first in both lists.
    mine = await _session_with_a_turn(engine, user, "mine", "0.25")
    theirs = await _session_with_a_turn(engine, other, "theirs", "7")

    sessions = await engine.sessions.list(user.ctx, limit=20, offset=0)
    assert ([s.id for s in sessions.items], sessions.total) == ([mine], 1)
    assert [s.id for s in (await engine.sessions.list(other.ctx, limit=20, offset=0)).items] == [theirs]

    usage = await engine.usage.for_user(user.ctx, start=None, end=None, limit=20, offset=0)
    # The budgets are the caller's spend too, whatever the range: the other user's 7 CNY is not in them.
    assert [(b.budget, b.spent) for b in usage.budgets] == [("daily", Decimal("0.25")), ("monthly", Decimal("0.25"))]
    assert [b.remaining for b in usage.budgets] == [b.limit - b.spent if b.limit else None for b in usage.budgets]
    assert usage.model_dump(mode="json", exclude={"budgets"}) == {
        "start": None,
        "end": None,
        "totals": {
            "input_tokens": 100,
            "output_tokens": 10,
            "cached_tokens": 0,
            "cost": "0.2500000000",
            "currency": "CNY",
            "model_calls": 1,
        },
        "items": [
            {
                "session_id": str(mine),
                "title": "mine",
                "input_tokens": 100,
                "output_tokens": 10,
                "cached_tokens": 0,
                "cost": "0.2500000000",
                "currency": "CNY",
                "model_calls": 1,
            }
        ],
        "total": 1,
        "limit": 20,
        "offset": 0,
    }


async def test_a_profile_is_read_by_its_owner_only(engine: RuntimeEngine, make_user: Callable[[], User]) -> None:
    owner, stranger = make_user(), make_user()
    await engine.profiles.put(owner.ctx, ProfileUpdate(username="owner", bio="private bio"))
    profile = await engine.profiles.get(stranger.ctx)
    assert (profile.user_id, profile.username, profile.bio, profile.created_at) == (stranger.id, "", None, None)


@asynccontextmanager
async def _messages_table_locked(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A transaction holding agent_chat_messages exclusively: every read of the table waits for it."""
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE agent_chat_messages IN ACCESS EXCLUSIVE MODE")
            yield conn
    finally:
        await conn.close()


async def _until_a_read_waits(conn: asyncpg.Connection) -> None:
    """Until another connection waits for our lock on agent_chat_messages (a condition, not a guess)."""
    async with asyncio.timeout(10):
        while True:
            waiting = await conn.fetchval(
                """
                SELECT EXISTS (SELECT 1 FROM pg_locks
                               WHERE NOT granted AND relation = 'agent_chat_messages'::regclass
                                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
                """
            )
            if waiting:
                return
            await asyncio.sleep(0.005)


async def _hand_the_id_to(conn: asyncpg.Connection, session_id: UUID, new_owner: UUID) -> None:
    """Inside the locking transaction: the session is deleted and its id re-created by another user
    (possible through AG-UI, where the client names the thread), with messages and cost of their own."""
    await conn.execute("DELETE FROM agent_chat_sessions WHERE id = $1", session_id)
    await conn.execute(
        "INSERT INTO agent_chat_sessions (id, user_id, title, billing_country_snapshot, next_seq)"
        " VALUES ($1, $2, 'theirs', 'CN', 3)",
        session_id,
        new_owner,
    )
    await conn.execute(
        """
        INSERT INTO agent_chat_messages (id, session_id, user_id, message_id, seq, role, content, metadata,
                                         input_tokens, output_tokens, cost, currency)
        VALUES (gen_random_uuid(), $1, $2, 'q', 1, 'user', 'their question', '{"kind": "user_input"}', 0, 0, 0, 'CNY'),
               (gen_random_uuid(), $1, $2, 'a', 2, 'assistant', 'their answer',
                '{"kind": "assistant_output", "stage": "intent", "cost_source": "custom_pricing"}', 900, 90, 3, 'CNY')
        """,
        session_id,
        new_owner,
    )


async def _read_racing_the_reuse_of_its_session_id(
    engine: RuntimeEngine, make_user: Callable[[], User], database_url: str, read: Callable[..., Awaitable[Any]]
) -> Any:
    """Ownership is checked first, then the messages are read. The owner filter on that second statement
    looks redundant (a message's owner is its session's, by the composite foreign key), but between the
    two statements the session can be deleted and its id re-created by another user. The read is frozen
    at that point (the messages table locked until the swap commits); its result is returned."""
    owner, other = make_user(), make_user()
    sid = await _session_with_a_turn(engine, owner, "mine", "0.5")
    async with _messages_table_locked(database_url) as conn:
        pending = asyncio.create_task(read(owner.ctx, sid))
        await _until_a_read_waits(conn)
        await _hand_the_id_to(conn, sid, other.id)
    result = await pending
    # The swap really happened: the new owner sees their rows.
    theirs = await engine.messages.list_visible(other.ctx, sid, limit=20, offset=0)
    assert [m.content for m in theirs.items] == ["their question", "their answer"]
    return result


async def test_messages_page_racing_the_reuse_of_its_session_id_shows_nothing_foreign(
    engine: RuntimeEngine, make_user: Callable[[], User], database_url: str
) -> None:
    page = await _read_racing_the_reuse_of_its_session_id(
        engine, make_user, database_url, lambda ctx, sid: engine.messages.list_visible(ctx, sid, limit=20, offset=0)
    )
    assert page == Page(items=[], total=0, limit=20, offset=0)


async def test_session_usage_racing_the_reuse_of_its_session_id_sums_nothing_foreign(
    engine: RuntimeEngine, make_user: Callable[[], User], database_url: str
) -> None:
    usage = await _read_racing_the_reuse_of_its_session_id(engine, make_user, database_url, engine.usage.for_session)
    zero = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost": "0", "currency": "CNY", "model_calls": 0}
    assert usage.model_dump(mode="json") == {"session_id": str(usage.session_id), "total": zero, "by_stage": []}
