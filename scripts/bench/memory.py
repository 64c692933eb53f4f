"""Chat memory on PostgreSQL: our append-only repository against a Spring-AI-style rewrite; prints tables.

    uv run python scripts/bench/memory.py [--database-url URL] [--turns 30] [--skip-litellm]

Creates a fresh database `agent_runtime_bench_<random>` on the server (default
postgresql://postgres@127.0.0.1:5432/postgres, or `--database-url`, an admin URL of another server),
applies the migrations, and drops it WITH (FORCE) at the end, also on failure.

Implementations, on the same server and database:
- ours: `MessageWindowChatMemory` over `PostgresChatMemoryRepository` (agent_chat_messages, append-only;
  one `UPDATE ... RETURNING` on the session row + one INSERT per message; window = bounded tail read).
- spring-full: Spring AI's `MessageWindowChatMemory` + `JdbcChatMemoryRepository.saveAll`, reimplemented
  here on `bench_spring_ai_memory(conversation_id, idx, role, content)` with an index on
  (conversation_id, idx) like SPRING_AI_CHAT_MEMORY: every `add` SELECTs the whole conversation (its own
  statement, outside the write transaction, as in Spring AI), appends, trims to the window, then DELETEs
  every row and re-INSERTs them all (one batch) in one transaction. The window is as large as the
  conversation, i.e. what a Spring AI user who keeps the full history gets. `get` = SELECT all.
- spring-trim20: the same with maxMessages=20 (Spring AI's default): the stored conversation never holds
  more than 20 rows (older messages are deleted), so its cost does not depend on the conversation length.

Per size (20, 500, 5000 pre-filled messages: alternating user/assistant turns, every fifth turn an
assistant tool call + its tool result + the final answer), measured over `--turns` turns after 3 warm-up
turns (spring-full at 5000: a third of them, after 1). ours and spring-trim20 take turns alternately, so
a load spike on the machine hits both alike; spring-full runs next, alone, and its dead rows are vacuumed
(untimed) before the next size, so its clean-up does not slow the others down. After each spring-full
turn its two oldest rows are deleted (untimed), so every turn starts at the pre-filled length.
- write ms: wall time of one turn = `add([user])` then `add([assistant reply])` (two adds, as a chat
  advisor does: before and after the model call), median and p90;
- rows/turn: heap rows inserted + updated + deleted by the turn (ours: the INSERTs, verified with a
  count, + one session-row UPDATE per add; Spring: the DELETE and INSERT row counts);
- WAL B/turn: pg_wal_lsn_diff of pg_current_wal_insert_lsn() around the turn, median. The LSN is
  server-wide: anything else writing to the same server at that moment is counted too;
- read ms: `get` (ours: max_messages=20 and a token budget of 3000 counted with a cheap deterministic
  counter, ~len/4 per message; Spring: SELECT all rows + one Python object per row, no windowing);
- msgs/get: messages `get` returns.
Then a lost-update demo (16 concurrent adds to one conversation, per implementation), and one line with
LiteLLM's real tokenizer instead of the cheap counter (ours, 500 messages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
from tests.support.database import LOCAL_SERVER, PgServer, create_database, drop_database, find_server  # noqa: E402

from agent_runtime.db.migrations import apply_migrations  # noqa: E402
from agent_runtime.db.pool import create_pool  # noqa: E402
from agent_runtime.engine.context import RequestContext  # noqa: E402
from agent_runtime.engine.conversation import (  # noqa: E402
    AssistantMessage,
    ChatMessage,
    ChatMetadata,
    MessageWindowChatMemory,
    ToolCallSpec,
    ToolMessage,
    UserMessage,
    WindowPolicy,
)
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository  # noqa: E402

SIZES = (20, 500, 5000)
WINDOW = 20
TOKEN_BUDGET = 3000
CONCURRENT_ADDS = 16
DEMO_ROUNDS = 3
WARMUP = 3
MODEL = "deepseek/deepseek-flash"

_VOCABULARY = (
    "the a to of and in that is for it on with as was be this by are at from or have an not they which you "
    "post friend photo comment like share group event message profile follow feed story reply week today "
    "weekend trip dinner music movie game team city park coffee plan idea question answer help thanks "
    "please maybe sure great nice really also just about more some time people could would should there "
    "their what when where how why because after before again still already never always often"
)
_WORDS = tuple(_VOCABULARY.split())


# --------------------------------------------------------------------------------------------- messages


def cheap_token_counter(message: ChatMessage) -> int:
    """~4 characters per token plus 4 tokens of framing: deterministic and costs nothing."""
    text = message.content
    if isinstance(message, AssistantMessage):
        text += "".join(call.name + call.arguments for call in message.tool_calls)
    return 4 + (len(text) + 3) // 4


class Texts:
    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def words(self, count: int) -> str:
        return " ".join(self._rng.choice(_WORDS) for _ in range(count))

    def user(self) -> UserMessage:
        return UserMessage(content=self.words(self._rng.randint(10, 40)))

    def reply(self) -> AssistantMessage:
        origin = ChatMetadata(stage="answer", model=MODEL)
        return AssistantMessage(content=self.words(self._rng.randint(40, 140)), metadata=origin)

    def tool_call(self) -> list[ChatMessage]:
        call_id = f"call_{uuid.uuid4().hex[:16]}"
        arguments = json.dumps({"query": self.words(4), "limit": 5})
        call = AssistantMessage(
            tool_calls=[ToolCallSpec(id=call_id, name="search_posts", arguments=arguments)],
            metadata=ChatMetadata(stage="tools", model=MODEL),
        )
        results = [{"post_id": str(uuid.uuid4()), "text": self.words(15)} for _ in range(3)]
        result = ToolMessage(tool_call_id=call_id, name="search_posts", content=json.dumps(results))
        return [call, result]

    def conversation(self, size: int) -> list[ChatMessage]:
        """`size` messages: turns of user + reply; every fifth turn (the first included) uses a tool."""
        messages: list[ChatMessage] = []
        turn = 0
        while len(messages) < size:
            messages.append(self.user())
            if turn % 5 == 0:
                messages.extend(self.tool_call())
            messages.append(self.reply())
            turn += 1
        return messages[:size]


# -------------------------------------------------------------------------------------- implementations


class Memory(Protocol):
    name: str
    rows_written: int

    async def new_conversation(self) -> str: ...

    async def prefill(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None: ...

    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None: ...

    async def get(self, conversation_id: str) -> int:
        """Reads the window; returns how many messages it holds."""
        ...

    async def stored_contents(self, conversation_id: str) -> list[str]: ...

    async def keep_length(self, conversation_id: str) -> None:
        """Untimed, after a measured turn: bring the conversation back to its pre-filled length, if needed."""
        ...


class OurMemory:
    name = "ours"

    def __init__(self, pool: asyncpg.Pool, policy: WindowPolicy) -> None:
        self._pool = pool
        self._ctx = RequestContext(user_id=uuid.uuid4())
        self._repository = PostgresChatMemoryRepository(pool, self._ctx)
        self._memory = MessageWindowChatMemory(self._repository, policy)
        self.rows_written = 0
        self.inserted = 0

    def with_policy(self, policy: WindowPolicy) -> OurMemory:
        other = OurMemory(self._pool, policy)
        other._ctx = self._ctx
        other._repository = self._repository
        other._memory = MessageWindowChatMemory(self._repository, policy)
        return other

    async def new_conversation(self) -> str:
        session_id = uuid.uuid4()
        await self._pool.execute(
            "INSERT INTO agent_chat_sessions (id, user_id, billing_country_snapshot) VALUES ($1, $2, 'CN')",
            session_id,
            self._ctx.user_id,
        )
        return str(session_id)

    async def prefill(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        for start in range(0, len(messages), 250):
            await self._repository.append(conversation_id, messages[start : start + 250])
        self.inserted += len(messages)

    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        await self._memory.add(conversation_id, messages)
        # insert_messages: one UPDATE of the session row, then one INSERT per message.
        self.rows_written += 1 + len(messages)
        self.inserted += len(messages)

    async def get(self, conversation_id: str) -> int:
        return len(await self._memory.get(conversation_id))

    async def stored_contents(self, conversation_id: str) -> list[str]:
        rows = await self._pool.fetch(
            "SELECT content FROM agent_chat_messages WHERE session_id = $1 AND seq > 0 ORDER BY seq",
            uuid.UUID(conversation_id),
        )
        return [r["content"] for r in rows]

    async def keep_length(self, conversation_id: str) -> None:
        # Append-only, and its cost does not depend on the length: nothing to undo.
        return None


SPRING_SCHEMA = """
CREATE TABLE bench_spring_ai_memory (
    conversation_id text NOT NULL,
    idx             integer NOT NULL,
    role            text NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content         text NOT NULL
);
CREATE INDEX bench_spring_ai_memory_conversation_idx ON bench_spring_ai_memory (conversation_id, idx);
"""


@dataclass(frozen=True)
class SpringMessage:
    role: str
    content: str


def to_spring(message: ChatMessage) -> SpringMessage:
    # Same text payload as ours (tool calls serialised into the content), without ids or metadata.
    content = message.content
    if isinstance(message, AssistantMessage) and message.tool_calls:
        content += json.dumps([call.model_dump() for call in message.tool_calls])
    return SpringMessage(role=message.role, content=content)


class SpringAiMemory:
    """Spring AI 1.0 `MessageWindowChatMemory.add` + `JdbcChatMemoryRepository`, statement for statement."""

    def __init__(self, pool: asyncpg.Pool, max_messages: int | None, name: str) -> None:
        self._pool = pool
        self._max_messages = max_messages
        self.name = name
        self.rows_written = 0

    async def new_conversation(self) -> str:
        return str(uuid.uuid4())

    async def prefill(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        # What Spring AI would hold after these messages were added: all of them, or the newest window.
        stored = self._process([], [to_spring(m) for m in messages])
        await self._pool.copy_records_to_table(
            "bench_spring_ai_memory",
            records=[(conversation_id, i, m.role, m.content) for i, m in enumerate(stored)],
            columns=["conversation_id", "idx", "role", "content"],
        )

    async def find_by_conversation_id(self, conversation_id: str) -> list[SpringMessage]:
        rows = await self._pool.fetch(
            "SELECT role, content FROM bench_spring_ai_memory WHERE conversation_id = $1 ORDER BY idx",
            conversation_id,
        )
        return [SpringMessage(role=r["role"], content=r["content"]) for r in rows]

    async def save_all(self, conversation_id: str, messages: Sequence[SpringMessage]) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                "DELETE FROM bench_spring_ai_memory WHERE conversation_id = $1", conversation_id
            )
            await conn.executemany(
                "INSERT INTO bench_spring_ai_memory (conversation_id, idx, role, content) VALUES ($1, $2, $3, $4)",
                [(conversation_id, i, m.role, m.content) for i, m in enumerate(messages)],
            )
        self.rows_written += int(status.split()[-1]) + len(messages)

    def _process(self, memory: list[SpringMessage], new: list[SpringMessage]) -> list[SpringMessage]:
        # MessageWindowChatMemory.process: a new system message replaces older ones; then the oldest
        # non-system messages are removed until the window fits.
        known = set(memory)
        new_system = any(m.role == "system" and m not in known for m in new)
        processed = [m for m in memory if not (new_system and m.role == "system")] + new
        if self._max_messages is None or len(processed) <= self._max_messages:
            return processed
        to_remove = len(processed) - self._max_messages
        trimmed: list[SpringMessage] = []
        removed = 0
        for message in processed:
            if message.role == "system" or removed >= to_remove:
                trimmed.append(message)
            else:
                removed += 1
        return trimmed

    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        memory = await self.find_by_conversation_id(conversation_id)
        await self.save_all(conversation_id, self._process(memory, [to_spring(m) for m in messages]))

    async def get(self, conversation_id: str) -> int:
        return len(await self.find_by_conversation_id(conversation_id))

    async def stored_contents(self, conversation_id: str) -> list[str]:
        return [m.content for m in await self.find_by_conversation_id(conversation_id)]

    async def keep_length(self, conversation_id: str) -> None:
        if self._max_messages is None:
            # Drop the oldest turn's two rows, so every measured turn starts at the pre-filled length.
            await self._pool.execute(
                "DELETE FROM bench_spring_ai_memory WHERE conversation_id = $1 AND idx < 2", conversation_id
            )


# ------------------------------------------------------------------------------------------ measurement


def p90(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]


@dataclass(frozen=True)
class Turn:
    write_ms: float
    read_ms: float
    wal_bytes: int
    rows: int
    window: int


@dataclass
class Result:
    size: int
    name: str
    turns: int
    write_ms: list[float] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)
    wal_bytes: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    window: int = 0

    def add(self, turn: Turn) -> None:
        self.write_ms.append(turn.write_ms)
        self.read_ms.append(turn.read_ms)
        self.wal_bytes.append(turn.wal_bytes)
        self.rows.append(turn.rows)
        self.window = turn.window


async def one_turn(memory: Memory, conversation_id: str, texts: Texts, wal: asyncpg.Connection) -> Turn:
    user, reply = texts.user(), texts.reply()
    rows_before = memory.rows_written
    lsn = await wal.fetchval("SELECT pg_current_wal_insert_lsn()::text")
    started = time.perf_counter()
    await memory.add(conversation_id, [user])
    await memory.add(conversation_id, [reply])
    written = time.perf_counter()
    wal_bytes = await wal.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::bigint", lsn)
    read_started = time.perf_counter()
    window = await memory.get(conversation_id)
    read_done = time.perf_counter()
    return Turn(
        write_ms=(written - started) * 1000,
        read_ms=(read_done - read_started) * 1000,
        wal_bytes=wal_bytes,
        rows=memory.rows_written - rows_before,
        window=window,
    )


async def measure_block(
    entries: list[tuple[Memory, str]], size: int, turns: int, texts: Texts, wal: asyncpg.Connection
) -> list[Result]:
    """Turns interleaved across `entries`, so a load spike on the machine hits each of them alike."""
    plans: list[tuple[Memory, str, int, Result]] = []
    for memory, conversation_id in entries:
        slow = memory.name == "spring-full" and size >= 5000
        n, warmup = (max(5, turns // 3), 1) if slow else (turns, WARMUP)
        plans.append((memory, conversation_id, warmup, Result(size=size, name=memory.name, turns=n)))
    started = time.perf_counter()
    for index in range(max(warmup + result.turns for _, _, warmup, result in plans)):
        for memory, conversation_id, warmup, result in plans:
            if index >= warmup + result.turns:
                continue
            turn = await one_turn(memory, conversation_id, texts, wal)
            await memory.keep_length(conversation_id)
            if index >= warmup:
                result.add(turn)
    names = ", ".join(memory.name for memory, _ in entries)
    print(f"  {size:>5} msgs, {names}: {time.perf_counter() - started:5.1f}s", file=sys.stderr)
    return [result for _, _, _, result in plans]


async def run_sizes(
    pool: asyncpg.Pool, wal: asyncpg.Connection, turns: int, policy: WindowPolicy
) -> tuple[list[Result], OurMemory]:
    ours = OurMemory(pool, policy)
    memories: list[Memory] = [
        ours,
        SpringAiMemory(pool, WINDOW, "spring-trim20"),
        SpringAiMemory(pool, None, "spring-full"),
    ]
    texts = Texts(seed=7)
    prepared: dict[int, list[tuple[Memory, str]]] = {}
    started = time.perf_counter()
    for size in SIZES:
        history = texts.conversation(size)
        for memory in memories:
            conversation_id = await memory.new_conversation()
            await memory.prefill(conversation_id, history)
            prepared.setdefault(size, []).append((memory, conversation_id))
    await pool.execute("ANALYZE agent_chat_sessions, agent_chat_messages, bench_spring_ai_memory")
    print(f"pre-filled {3 * len(SIZES)} conversations in {time.perf_counter() - started:.1f}s", file=sys.stderr)

    results: list[Result] = []
    for size, entries in prepared.items():
        blocks = [
            [e for e in entries if e[0].name != "spring-full"],
            [e for e in entries if e[0].name == "spring-full"],
        ]
        for block in blocks:
            results.extend(await measure_block(block, size, turns, texts, wal))
        # Untimed: clear the rewrite churn, so its clean-up does not land in the next size's measurements.
        await pool.execute("VACUUM (ANALYZE) bench_spring_ai_memory")
    # Every INSERT ours counted must be in the table (it is append-only: nothing else removes rows).
    stored = await pool.fetchval("SELECT count(*) FROM agent_chat_messages")
    assert stored == ours.inserted, (stored, ours.inserted)
    return results, ours


@dataclass
class DemoRound:
    name: str
    stored: int
    expected: int
    survived: int
    duplicates: int


async def lost_update_demo(pool: asyncpg.Pool, policy: WindowPolicy) -> list[DemoRound]:
    """16 concurrent `add`s of one user message each to a 20-message conversation, per implementation."""
    texts = Texts(seed=11)
    rounds: list[DemoRound] = []
    for _ in range(DEMO_ROUNDS):
        memories: list[Memory] = [
            OurMemory(pool, policy),
            SpringAiMemory(pool, WINDOW, "spring-trim20"),
            SpringAiMemory(pool, None, "spring-full"),
        ]
        for memory in memories:
            conversation_id = await memory.new_conversation()
            await memory.prefill(conversation_id, texts.conversation(20))
            before = await memory.stored_contents(conversation_id)
            markers = [f"concurrent add {i} {uuid.uuid4().hex}" for i in range(CONCURRENT_ADDS)]
            await asyncio.gather(*(memory.add(conversation_id, [UserMessage(content=m)]) for m in markers))
            contents = await memory.stored_contents(conversation_id)
            expected = 20 + CONCURRENT_ADDS if memory.name != "spring-trim20" else WINDOW
            rounds.append(
                DemoRound(
                    name=memory.name,
                    stored=len(contents),
                    expected=expected,
                    survived=len(set(markers) & set(contents)),
                    # Rows beyond one per distinct text (prefilled tool calls share the empty text).
                    duplicates=(len(contents) - len(set(contents))) - (len(before) - len(set(before))),
                )
            )
    return rounds


async def litellm_line(ours: OurMemory, turns: int) -> str:
    """ours at 500 messages, the window counted with LiteLLM's tokenizer for MODEL (offline)."""
    from agent_runtime.engine.llm.litellm_import import load_litellm

    started = time.perf_counter()
    load_litellm()
    imported = time.perf_counter() - started
    memory = ours.with_policy(WindowPolicy(max_messages=WINDOW, max_tokens=TOKEN_BUDGET, model=MODEL))
    conversation_id = await memory.new_conversation()
    await memory.prefill(conversation_id, Texts(seed=13).conversation(500))
    timings: list[float] = []
    for _ in range(turns + 1):
        started = time.perf_counter()
        await memory.get(conversation_id)
        timings.append((time.perf_counter() - started) * 1000)
    cold, warm = timings[0], timings[1:]
    return (
        f"LiteLLM counter ({MODEL}), ours, 500 msgs: get p50 {statistics.median(warm):.2f} ms, "
        f"p90 {p90(warm):.2f} ms with its count cache warm; first get (cold cache) {cold:.1f} ms; "
        f"importing litellm took {imported:.1f} s (once per process)"
    )


# ------------------------------------------------------------------------------------------------ report


def print_table(results: list[Result]) -> None:
    ours = {r.size: r for r in results if r.name == "ours"}
    print(
        "| messages | implementation | turns | write ms p50 | write ms p90 | rows written/turn | WAL B/turn p50 "
        "| read ms p50 | read ms p90 | msgs/get | write x ours | read x ours |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        base = ours[r.size]
        write, read = statistics.median(r.write_ms), statistics.median(r.read_ms)
        ratios = ("—", "—")
        if r.name != "ours":
            ratios = (
                f"{write / statistics.median(base.write_ms):.1f}x",
                f"{read / statistics.median(base.read_ms):.1f}x",
            )
        cells = [
            f"{r.size:,}",
            r.name,
            str(r.turns),
            f"{write:.2f}",
            f"{p90(r.write_ms):.2f}",
            f"{statistics.mean(r.rows):,.0f}",
            f"{statistics.median(r.wal_bytes):,.0f}",
            f"{read:.2f}",
            f"{p90(r.read_ms):.2f}",
            f"{r.window:,}",
            *ratios,
        ]
        print("| " + " | ".join(cells) + " |")


def print_verdict(results: list[Result]) -> None:
    by_key = {(r.size, r.name): r for r in results}
    ours_small, ours_large = by_key[(SIZES[0], "ours")], by_key[(SIZES[-1], "ours")]
    flat = statistics.median(ours_large.write_ms) / statistics.median(ours_small.write_ms)
    print(
        f"\nours, write p50 at {SIZES[-1]:,} / at {SIZES[0]:,} messages: {flat:.2f}x "
        f"(rows/turn {statistics.mean(ours_small.rows):.0f} -> {statistics.mean(ours_large.rows):.0f}, "
        f"WAL p50 {statistics.median(ours_small.wal_bytes):,.0f} -> {statistics.median(ours_large.wal_bytes):,.0f} B)"
    )
    ours_500, full_500 = by_key[(500, "ours")], by_key[(500, "spring-full")]
    ratios = {
        "write ms p50": statistics.median(full_500.write_ms) / statistics.median(ours_500.write_ms),
        "rows written": statistics.mean(full_500.rows) / statistics.mean(ours_500.rows),
        "WAL bytes": statistics.median(full_500.wal_bytes) / statistics.median(ours_500.wal_bytes),
    }
    print(
        "at 500 messages, spring-full / ours: "
        + ", ".join(
            f"{name} {ratio:,.1f}x ({'meets' if ratio >= 10 else 'MISSES'} 10x)" for name, ratio in ratios.items()
        )
    )


def print_demo(rounds: list[DemoRound]) -> None:
    print(
        f"\nLost-update demo: {CONCURRENT_ADDS} concurrent add() of one user message each to a 20-message "
        f"conversation, {DEMO_ROUNDS} rounds per implementation (pool of 20 connections)."
    )
    print("| implementation | round | rows stored / expected | new messages kept / 16 | duplicate rows |")
    print("|---|---:|---:|---:|---:|")
    names = list(dict.fromkeys(r.name for r in rounds))
    for name in names:
        for number, r in enumerate((r for r in rounds if r.name == name), start=1):
            print(f"| {r.name} | {number} | {r.stored} / {r.expected} | {r.survived} | {r.duplicates} |")


async def with_database(server: PgServer, body: Callable[[str], Awaitable[None]]) -> None:
    name = await create_database(server, prefix="agent_runtime_bench")
    try:
        await body(server.url_for(name))
    finally:
        await drop_database(server, name)
        print(f"dropped database {name}", file=sys.stderr)


async def main_async(args: argparse.Namespace) -> None:
    server = PgServer(admin_url=args.database_url, embedded=None) if args.database_url else await find_server()
    policy = WindowPolicy(max_messages=WINDOW, max_tokens=TOKEN_BUDGET, token_counter=cheap_token_counter)

    async def body(dsn: str) -> None:
        await apply_migrations(dsn)
        pool = await create_pool(dsn, min_size=2, max_size=CONCURRENT_ADDS + 4)
        wal = await asyncpg.connect(dsn)
        try:
            await pool.execute(SPRING_SCHEMA)
            version = await pool.fetchval("SHOW server_version")
            results, ours = await run_sizes(pool, wal, args.turns, policy)
            rounds = await lost_update_demo(pool, policy)
            extra = None if args.skip_litellm else await litellm_line(ours, args.turns)
        finally:
            await wal.close()
            await pool.close()
        print(
            f"PostgreSQL {version}; window max_messages={WINDOW}, token budget {TOKEN_BUDGET} (cheap counter "
            f"~len/4 for the table); one turn = add(user) + add(assistant reply). "
            f"Load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs."
        )
        print(
            "ours = MessageWindowChatMemory + PostgresChatMemoryRepository (append-only). "
            "spring-full = Spring AI read-all/trim/DELETE-all+INSERT-all with a window as large as the "
            "conversation (full history kept). spring-trim20 = the same with maxMessages=20 (stores at most "
            "20 rows, older history deleted).\n"
        )
        print_table(results)
        print_verdict(results)
        print_demo(rounds)
        if extra is not None:
            print(f"\n{extra}")

    try:
        await with_database(server, body)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"admin URL of the server to create the database on ({LOCAL_SERVER})")
    parser.add_argument("--turns", type=int, default=30, help="measured turns per size (a third for spring-full 5000)")
    parser.add_argument("--skip-litellm", action="store_true", help="skip the line with LiteLLM's tokenizer")
    args = parser.parse_args()
    if args.turns < 2:
        parser.error("--turns must be at least 2")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
