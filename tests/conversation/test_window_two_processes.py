"""Two processes, each with its own pool, compute the window of one session at the same moment: the same start,
the same summary and the same messages, and the cut they both make is stored once. The start is derived from
stored data alone (the messages and the stored marks), never from anything a process keeps."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from uuid import UUID

from tests.conftest import User

from agent_runtime.engine.conversation import AssistantMessage, MessageWindowChatMemory, UserMessage, WindowPolicy
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate

_READER = textwrap.dedent(
    """
    import asyncio, json, sys, uuid
    from agent_runtime.db.pool import create_pool
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.conversation import MessageWindowChatMemory, WindowPolicy
    from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository

    class Summarizer:
        async def summarize(self, request):
            return "summary of " + ",".join(m.content for m in request.dropped)

    async def main() -> None:
        url, user_id, cid = sys.argv[1:4]
        pool = await create_pool(url, min_size=1, max_size=2)
        repository = PostgresChatMemoryRepository(pool, RequestContext(user_id=uuid.UUID(user_id)))
        policy = WindowPolicy(max_messages=8, low_messages=4, summary_tokens=50, max_tokens=5000,
                              token_counter=lambda m: 1 + len(m.content))
        memory = MessageWindowChatMemory(repository, policy, summarizer=Summarizer())
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # the barrier
        window = await memory.window(cid)
        print(json.dumps({"start": window.start_id, "summary": window.summary, "cut": window.cut,
                          "messages": [m.content for m in window.messages]}), flush=True)
        await pool.close()

    asyncio.run(main())
    """
)


async def test_two_processes_compute_the_same_window(engine: RuntimeEngine, user: User, database_url: str) -> None:
    cid = str((await engine.sessions.create(user.ctx, SessionCreate())).id)
    repository = PostgresChatMemoryRepository(engine.pool, user.ctx)
    for turn in range(6):
        await repository.append(cid, [UserMessage(content=f"q{turn}"), AssistantMessage(content=f"a{turn}")])
    await repository.append(cid, [UserMessage(content="q6")])
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _READER,
            database_url,
            str(user.id),
            cid,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    async with asyncio.timeout(60):
        for proc in procs:
            assert proc.stdout is not None
            assert await proc.stdout.readline() == b"ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        outputs = await asyncio.gather(*(p.communicate() for p in procs))
    assert [p.returncode for p in procs] == [0, 0], [err.decode()[-800:] for _, err in outputs]
    windows = [json.loads(out) for out, _ in outputs]
    # 13 messages are over 8 (7 with the summary): the cut keeps 3 (4 with the summary) whole turns' worth.
    expected = {"start": None, "summary": "summary of q0,a0,q1,a1,q2,a2,q3,a3,q4,a4", "messages": ["q5", "a5", "q6"]}
    # Both cut, or the second read after the first had stored its cut (and then reads it): the same window.
    assert any(window["cut"] for window in windows)
    for window in windows:
        assert {**window, "start": None, "cut": None} == {**expected, "cut": None}
    assert windows[0]["start"] == windows[1]["start"]
    stored = await engine.pool.fetch(
        "SELECT start_message_id, summary FROM agent_memory_windows WHERE session_id = $1", UUID(cid)
    )
    assert [(r["start_message_id"], r["summary"]) for r in stored] == [(windows[0]["start"], expected["summary"])]

    # A third reader (this process, no summarizer) now reads the stored start and summary: no cut.
    policy = WindowPolicy(
        max_messages=8, low_messages=4, summary_tokens=50, max_tokens=5000, token_counter=lambda m: 1 + len(m.content)
    )
    window = await MessageWindowChatMemory(repository, policy).window(cid)
    assert (window.start_id, window.summary, window.cut) == (windows[0]["start"], expected["summary"], False)
    assert [m.content for m in window.messages] == expected["messages"]
