from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from tests.conftest import User
from tests.support.rows import stored_rows

from agent_runtime.engine.conversation import (
    AssistantMessage,
    ChatMessage,
    DuplicateMessageError,
    InvalidConversationIdError,
    MessageWindowChatMemory,
    SystemMessage,
    ToolCallSpec,
    ToolMessage,
    UserMessage,
    WindowPolicy,
)
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate


async def _conversation(engine: RuntimeEngine, user: User) -> str:
    return str((await engine.sessions.create(user.ctx, SessionCreate())).id)


def _repo(engine: RuntimeEngine, user: User) -> PostgresChatMemoryRepository:
    return PostgresChatMemoryRepository(engine.pool, user.ctx)


async def test_round_trip_with_tool_calls(engine: RuntimeEngine, user: User) -> None:
    cid = await _conversation(engine, user)
    repo = _repo(engine, user)
    call = ToolCallSpec(id="call_abc", name="calculator", arguments='{"expression": "6*7"}')
    conversation: list[ChatMessage] = [
        SystemMessage(content="be brief"),
        UserMessage(content="what is 6*7?"),
        AssistantMessage(content="", tool_calls=[call]),
        ToolMessage(tool_call_id="call_abc", name="calculator", content='{"result": "42"}'),
        ToolMessage(tool_call_id="call_x", name="calculator", content="boom", is_error=True),
        AssistantMessage(content="42"),
    ]
    await repo.append(cid, conversation)
    read = await repo.find_by_conversation_id(cid, max_messages=20)
    assert read.system is not None and read.system.content == "be brief"
    strip = {"created_at"}
    assert [m.model_dump(exclude=strip) for m in read.messages] == [
        m.model_dump(exclude=strip) for m in conversation[1:]
    ]
    assert all(m.created_at.tzinfo is not None for m in read.messages)
    stored_ids = [m.message_id for m in await stored_rows(engine.pool, user.ctx, cid)]  # type: ignore[arg-type]
    assert stored_ids == [m.id for m in conversation]
    with pytest.raises(DuplicateMessageError):
        await repo.append(cid, [conversation[1]])


async def test_chat_memory_on_postgres_windows_and_clears(engine: RuntimeEngine, user: User) -> None:
    cid = await _conversation(engine, user)
    memory = MessageWindowChatMemory(_repo(engine, user), WindowPolicy(max_messages=4, token_counter=lambda m: 1))
    for i in range(5):
        await memory.add(cid, [UserMessage(content=f"q{i}"), AssistantMessage(content=f"a{i}")])
    window = await memory.get(cid)
    assert [m.content for m in window] == ["q3", "a3", "q4", "a4"]
    await memory.clear(cid)
    assert await memory.get(cid) == []
    marks = "SELECT count(*) FROM agent_memory_windows WHERE session_id = $1::uuid"
    assert await engine.pool.fetchval(marks, cid) == 0, "the cut marks (and their summaries) go with the messages"
    await memory.add(cid, [UserMessage(content="again"), AssistantMessage(content="fresh")])
    assert [m.content for m in await memory.get(cid)] == ["again", "fresh"]


async def test_foreign_and_invalid_conversations(engine: RuntimeEngine, make_user: Callable[[], User]) -> None:
    from agent_runtime.engine.errors import NotFoundError

    owner, intruder = make_user(), make_user()
    cid = await _conversation(engine, owner)
    await _repo(engine, owner).append(cid, [UserMessage(content="private")])
    other = _repo(engine, intruder)
    assert (await other.find_by_conversation_id(cid, max_messages=20)).messages == []
    with pytest.raises(NotFoundError):
        await other.append(cid, [UserMessage(content="inject")])
    await other.delete_by_conversation_id(cid)
    assert len((await _repo(engine, owner).find_by_conversation_id(cid, max_messages=20)).messages) == 1
    for bad in ("", "  ", "not-a-uuid"):
        with pytest.raises(InvalidConversationIdError):
            await other.find_by_conversation_id(bad, max_messages=5)


async def test_fifty_concurrent_adds_all_land(engine: RuntimeEngine, user: User) -> None:
    cid = await _conversation(engine, user)
    memory = MessageWindowChatMemory(_repo(engine, user))
    await asyncio.gather(*(memory.add(cid, [UserMessage(content=f"m{i}")]) for i in range(50)))
    rows = await engine.pool.fetch(
        "SELECT seq, content FROM agent_chat_messages WHERE session_id = $1::uuid ORDER BY seq", cid
    )
    assert len(rows) == 50
    assert [r["seq"] for r in rows] == list(range(1, 51))
    assert {r["content"] for r in rows} == {f"m{i}" for i in range(50)}


_WRITER = textwrap.dedent(
    """
    import asyncio, sys, uuid
    from agent_runtime.db.pool import create_pool
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.conversation import MessageWindowChatMemory, UserMessage
    from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository

    async def main() -> None:
        url, user_id, cid, tag = sys.argv[1:5]
        pool = await create_pool(url, min_size=1, max_size=10)
        memory = MessageWindowChatMemory(PostgresChatMemoryRepository(pool, RequestContext(user_id=uuid.UUID(user_id))))
        for i in range(40):
            await memory.add(cid, [UserMessage(content=f"{tag}-{i}")])
        await pool.close()

    asyncio.run(main())
    """
)


async def test_two_processes_adding_at_once_lose_nothing(engine: RuntimeEngine, user: User, database_url: str) -> None:
    cid = await _conversation(engine, user)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, database_url, str(user.id), cid, tag, stderr=asyncio.subprocess.PIPE
        )
        for tag in ("A", "B")
    ]
    errors = await asyncio.gather(*(p.communicate() for p in procs))
    assert [p.returncode for p in procs] == [0, 0], [e[1].decode()[-800:] for e in errors]
    rows = await engine.pool.fetch(
        "SELECT seq, content FROM agent_chat_messages WHERE session_id = $1::uuid ORDER BY seq", cid
    )
    assert [r["seq"] for r in rows] == list(range(1, 81))
    for tag in ("A", "B"):
        mine = [r["content"] for r in rows if r["content"].startswith(f"{tag}-")]
        assert mine == [f"{tag}-{i}" for i in range(40)]  # arrival order per writer


def _plan_rows(node: dict[str, Any]) -> int:
    """Table rows read by the plan's scans of agent_chat_messages (CTE re-reads not counted)."""
    own = 0
    if node.get("Relation Name") == "agent_chat_messages":
        own = int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1)) + int(
            node.get("Rows Removed by Filter", 0)
        )
    return own + sum(_plan_rows(child) for child in node.get("Plans", []))


async def test_window_read_touches_only_the_window(engine: RuntimeEngine, user: User, db_pool: asyncpg.Pool) -> None:
    cid = await _conversation(engine, user)
    repo = _repo(engine, user)
    await repo.append(cid, [SystemMessage(content="sys"), UserMessage(content="first question")])
    batch: list[ChatMessage] = []
    for i in range(2_499):
        batch += [AssistantMessage(content=f"a{i}"), AssistantMessage(content=f"b{i}")]
    await repo.append(cid, batch)
    from agent_runtime.engine.conversation.repository import WINDOW_SQL

    async with db_pool.acquire() as conn:
        await conn.execute("ANALYZE agent_chat_messages")
        raw = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {WINDOW_SQL}", cid, user.id, 20)
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    total = await engine.pool.fetchval("SELECT count(*) FROM agent_chat_messages WHERE session_id = $1::uuid", cid)
    assert total == 5_000
    # 21 tail rows (one more than asked) + 1 system + the first user row (the start before any cut) + 1 anchor
    # user row (the same old first question), plus a little slack.
    assert _plan_rows(plan) <= 30, json.dumps(plan)[:3000]
    read = await repo.find_by_conversation_id(cid, max_messages=20)
    assert read.system is not None and [m.content for m in read.messages][:2] == ["first question", "b2488"]
    assert not read.complete


async def test_window_uses_the_newest_system_message(engine: RuntimeEngine, user: User) -> None:
    """Spring AI's rule (a new system message replaces the old) on the production query. Checked by hand
    against the planted bug of issue 15 (the query's system part ordered oldest first): this test failed."""
    cid = await _conversation(engine, user)
    memory = MessageWindowChatMemory(_repo(engine, user), WindowPolicy(max_messages=10))
    await memory.add(cid, [SystemMessage(id="s-old", content="old rules"), UserMessage(id="u1", content="q1")])
    await memory.add(cid, [AssistantMessage(id="a1", content="r1"), SystemMessage(id="s-new", content="new rules")])
    await memory.add(cid, [UserMessage(id="u2", content="q2")])
    assert [(m.id, m.content) for m in await memory.get(cid)] == [
        ("s-new", "new rules"),
        ("u1", "q1"),
        ("a1", "r1"),
        ("u2", "q2"),
    ]
