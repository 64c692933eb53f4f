"""End-to-end cost of one agent run (RunService.start -> AG-UI events) against the DeepSeek stub; prints tables.

    uv run python scripts/bench/flow.py [--database-url URL] [--runs 20] [--concurrency 20] [--latency 0.5]

What runs: the real engine (`open_engine`: migrations, asyncpg pool, RunService, CrewAI flow, LLMClient over
LiteLLM) on a throwaway database `agent_runtime_bench_<random>` (created on the server of `--database-url`,
an admin URL, default postgresql://postgres@127.0.0.1:5432/postgres; dropped WITH (FORCE) at the end, also
on failure). The model is `tests/stubs/deepseek_stub.py` in a child process (spawned), so its CPU is not
charged to the engine; the stub's own CPU is read from /proc and shown apart. The stub is scripted per
stage from the request (a later stage's request starts with `Stage: <name>`, the intent stage's is the user's turn;
a marker in the user's message picks the
route and the latency), and every run is checked to have taken its route (model calls, tool results):
- short-circuit: intent -> DIRECT_EXECUTION (1 model call, streamed);
- full: intent -> NEEDS_EXECUTION, execution -> one `calculator` tool call, execution -> ExecutionResult,
  organization -> the answer (4 model calls; intent and organization streamed).
Streamed answers come in `--chunk-chars` characters per SSE chunk (default 4, about one token per chunk as
DeepSeek streams). Every session is pre-filled with `--history` messages (default 20 = the memory window),
so each run sees a full window, as a conversation in progress does.

Measured, after `engine.runs.ensure_warm()` and 3 runs of each kind:
- CPU ms per run: `time.process_time()` (all threads of this process: the loop, LiteLLM's helper threads,
  asyncpg) from calling `start()` to the terminal event, median/p90 of `--runs`
  sequential runs (full and short alternate, so a load spike hits both). `batch mean` = process CPU of the
  whole sequence / runs, which also counts work that finishes after the terminal event. `loop thread` =
  the event-loop thread's own CPU (`time.thread_time()`), the part that can delay other requests.
- time to RUN_STARTED and to the first TEXT_MESSAGE_CONTENT, wall clock from calling `start()`.
- thread hand-offs per run: jobs handed to any thread pool's queue during the sequential runs, by pool (what the
  loop's default executor runs inline is not one: engine/loop_executor.py).
- `--concurrency` full runs at once on as many sessions, stub answering at once: event-loop lag (a ticker
  sleeping 5 ms records how late it wakes: p50/p99/max) and the batch's wall time; then the same with the
  stub waiting `--latency` s before every answer (ideal wall: 4 model calls x latency). `stalled` = the wall
  time of ticks more than 30 ms late, `loop thread on CPU` = the loop thread's own CPU within them: low
  means the loop was ready but not running (waiting for the GIL, or for a core on a busy machine).
Targets: full <= 100 ms CPU, short-circuit <= 35 ms CPU, loop lag p99 <= 100 ms (instant batch).
`--breakdown N` (default 10) then times the main coroutines of N more runs of each kind (CPU per component; wrapped
after the tables, so the measured runs are not instrumented). `--soak S` then runs full flows for S seconds
(to attach a profiler: `py-spy record --pid PID`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    # Makes `tests.stubs` / `tests.support` importable when the script is run by path.
    sys.path.insert(0, str(ROOT))

# Before anything can import LiteLLM: no price-map download (offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.stubs.deepseek_stub import (  # noqa: E402
    DeepSeekStub,
    RecordedRequest,
    StubReply,
    StubToolCall,
    content_text,
)
from tests.support.database import LOCAL_SERVER, PgServer, create_database, drop_database, find_server  # noqa: E402

if TYPE_CHECKING:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.runtime import RuntimeEngine

API_KEY = "sk-bench-flow"
MODEL = "deepseek/deepseek-flash"
FULL, SHORT, SLOW = "[bench:full]", "[bench:short]", "[bench:slow]"
TARGET_FULL_MS, TARGET_SHORT_MS, TARGET_LAG_P99_MS = 100.0, 35.0, 100.0
TICK_SECONDS = 0.005
STALL_MS = 30.0
WARMUP_RUNS = 3
MODEL_CALLS_FULL = 4

# -- the stub (child process) ---------------------------------------------------------------------------

INTENT_SHORT: dict[str, Any] = {
    "route": "DIRECT_EXECUTION",
    "assistant_text": "Hi! I'm doing well, thanks for asking. What would you like to do today?",
    "intent_summary": "The user greets the assistant and asks how it is.",
    "execution_brief": None,
    "safety_flags": [],
}
INTENT_FULL: dict[str, Any] = {
    "route": "NEEDS_EXECUTION",
    "assistant_text": None,
    "intent_summary": "The user wants (17.5 * 4 + 3) / 7 computed exactly.",
    "execution_brief": "Compute (17.5 * 4 + 3) / 7 with the calculator and report the exact result.",
    "safety_flags": [],
}
EXECUTION = {
    "status": "SUCCESS",
    "execution_summary": "Evaluated (17.5 * 4 + 3) / 7 with the calculator.",
    "execution_data": {"expression": "(17.5 * 4 + 3) / 7", "result": "10.42857142857142857142857143"},
    "report_brief": "Tell the user the result is about 10.43 (exactly 10.428571...).",
}
ORGANIZATION = {
    "assistant_text": "(17.5 × 4 + 3) / 7 = 10.43 (10.428571… exactly). Anything else you want to work out?",
    "response_metadata": {},
}


def respond(request: RecordedRequest) -> StubReply:
    """Answer one stage (engine/flow/prompt.py): a later stage's request (the last user message) starts with
    `Stage: <name>`; otherwise the last user message is the user's turn, the intent stage's request."""
    messages = request.messages
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    turn = next((text for text in reversed(users) if not text.startswith("Stage: ")), "")
    delay = SLOW_LATENCY if SLOW in turn else 0.0
    stage = users[-1].split("\n", 1)[0] if users and users[-1].startswith("Stage: ") else "Stage: intent"
    if stage == "Stage: intent":
        content = json.dumps(INTENT_FULL if FULL in turn else INTENT_SHORT)
        return StubReply(content=content, delay_seconds=delay, chunk_chars=CHUNK_CHARS)
    if stage == "Stage: execution":
        if any(m.get("role") == "tool" for m in messages[last_user + 1 :]):
            return StubReply(content=json.dumps(EXECUTION), delay_seconds=delay, chunk_chars=CHUNK_CHARS)
        call = StubToolCall(
            id=f"call_{uuid.uuid4().hex[:24]}", name="calculator", arguments='{"expression": "(17.5 * 4 + 3) / 7"}'
        )
        return StubReply(tool_calls=[call], delay_seconds=delay)
    if stage == "Stage: organization":
        content = json.dumps(ORGANIZATION, ensure_ascii=False)
        return StubReply(content=content, delay_seconds=delay, chunk_chars=CHUNK_CHARS)
    return StubReply(content='{"error": "bench stub: unknown stage"}')


# Replaced in the child from the command line (see _serve).
SLOW_LATENCY = 0.5
CHUNK_CHARS = 4


def _serve(conn: Connection, latency: float, chunk_chars: int) -> None:
    global SLOW_LATENCY, CHUNK_CHARS
    SLOW_LATENCY, CHUNK_CHARS = latency, chunk_chars

    async def main() -> None:
        async with DeepSeekStub(api_key=API_KEY, responder=respond) as stub:
            conn.send(stub.base_url)
            await asyncio.Event().wait()

    asyncio.run(main())


class StubProcess:
    def __init__(self, latency: float, chunk_chars: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, latency, chunk_chars), daemon=True, name="deepseek-stub"
        )
        self.base_url = ""

    def start(self) -> None:
        self._process.start()
        if not self._conn.poll(60):
            raise RuntimeError("the stub process did not start")
        self.base_url = self._conn.recv()

    def cpu_seconds(self) -> float:
        """User + system CPU of the stub process so far (Linux /proc; 10 ms resolution)."""
        assert self._process.pid is not None
        fields = Path(f"/proc/{self._process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(5)


# -- one run ----------------------------------------------------------------------------------------------


@dataclass
class RunSample:
    cpu_ms: float
    loop_cpu_ms: float
    wall_s: float
    to_started_ms: float
    to_text_ms: float


async def run_once(engine: RuntimeEngine, ctx: RequestContext, session_id: uuid.UUID, text: str) -> RunSample:
    """One run from `start()` to its terminal event; checks it took the scripted route (model calls, tool)."""
    from agent_runtime.engine.conversation.chat_messages import UserMessage
    from agent_runtime.engine.runs.request.models import RunInput

    cpu0, loop0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    handle = await engine.runs.start(ctx, session_id, RunInput(new_messages=[UserMessage(content=text)]))
    started = first_text = None
    terminal: dict[str, Any] | None = None
    model_calls, tool_results = None, 0
    # The run's stored log: each event is its AG-UI JSON (`data`); the last one is terminal.
    async for logged in handle.events.stream():
        now = time.perf_counter()
        event = json.loads(logged.data)
        if event["type"] == "RUN_STARTED" and started is None:
            started = now - t0
        elif event["type"] == "TEXT_MESSAGE_CONTENT" and first_text is None:
            first_text = now - t0
        elif event["type"] == "TOOL_CALL_RESULT":
            tool_results += 1
        elif event["type"] == "CUSTOM" and event["name"] == "run_cost":
            model_calls = event["value"]["modelCalls"]
        elif logged.terminal:
            terminal = event
            break
    end, cpu, loop = time.perf_counter(), time.process_time(), time.thread_time()
    if terminal is None or terminal["type"] != "RUN_FINISHED":
        raise RuntimeError(f"run did not finish: {terminal!r}")
    if started is None or first_text is None:
        raise RuntimeError("run finished without RUN_STARTED or TEXT_MESSAGE_CONTENT")
    expected = (MODEL_CALLS_FULL, 1) if FULL in text else (1, 0)
    if (model_calls, tool_results) != expected:
        raise RuntimeError(f"scripted route not taken: {model_calls} model calls, {tool_results} tool results")
    return RunSample((cpu - cpu0) * 1000, (loop - loop0) * 1000, end - t0, started * 1000, first_text * 1000)


async def new_session(engine: RuntimeEngine, ctx: RequestContext, history: int) -> uuid.UUID:
    from agent_runtime.engine.conversation.chat_messages import AssistantMessage, UserMessage
    from agent_runtime.engine.conversation.postgres import to_new_message
    from agent_runtime.engine.sessions.models import SessionCreate

    session = await engine.sessions.create(ctx, SessionCreate(title="bench"))
    turns = [
        UserMessage(content=f"Earlier question number {i // 2}: what should I cook for a dinner with friends?")
        if i % 2 == 0
        else AssistantMessage(content="A pasta bake is easy for a group: prepare it ahead and bake it for 30 min.")
        for i in range(history)
    ]
    if turns:
        await engine.messages.append(ctx, session.id, [to_new_message(m) for m in turns])
    return session.id


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


# -- measurements -----------------------------------------------------------------------------------------


class ThreadJobs:
    """Jobs handed to any thread pool's queue, by the pool's thread-name prefix (what the loop's default executor
    runs inline is not one: engine/loop_executor.py)."""

    def __init__(self) -> None:
        self.by_pool: Counter[str] = Counter()
        original = ThreadPoolExecutor.submit
        jobs = self

        def noting(pool: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            jobs.by_pool[pool._thread_name_prefix or "?"] += 1
            return original(pool, fn, *args, **kwargs)

        ThreadPoolExecutor.submit = noting  # type: ignore[method-assign,assignment]


@dataclass
class Sequential:
    full: list[RunSample]
    short: list[RunSample]
    full_batch_ms: float
    short_batch_ms: float
    stub_full_ms: float
    stub_short_ms: float
    thread_jobs: dict[str, Counter[str]]


async def sequential(
    engine: RuntimeEngine, ctx: RequestContext, stub: StubProcess, runs: int, history: int
) -> Sequential:
    full_session = await new_session(engine, ctx, history)
    short_session = await new_session(engine, ctx, history)
    for _ in range(WARMUP_RUNS):
        await run_once(engine, ctx, full_session, f"{FULL} What is (17.5 * 4 + 3) / 7?")
        await run_once(engine, ctx, short_session, f"{SHORT} Hi, how are you doing today?")
    full: list[RunSample] = []
    short: list[RunSample] = []
    spent = {"full": 0.0, "short": 0.0}
    stub_spent = {"full": 0.0, "short": 0.0}
    jobs = ThreadJobs()
    thread_jobs: dict[str, Counter[str]] = {"full": Counter(), "short": Counter()}
    for _ in range(runs):
        for kind, session, text, samples in (
            ("full", full_session, f"{FULL} What is (17.5 * 4 + 3) / 7?", full),
            ("short", short_session, f"{SHORT} Hi, how are you doing today?", short),
        ):
            stub0, cpu0, jobs0 = stub.cpu_seconds(), time.process_time(), Counter(jobs.by_pool)
            samples.append(await run_once(engine, ctx, session, text))
            await asyncio.sleep(0.01)  # let work that outlives the terminal event finish inside this slot
            spent[kind] += time.process_time() - cpu0
            thread_jobs[kind] += jobs.by_pool - jobs0
            stub_spent[kind] += stub.cpu_seconds() - stub0
    return Sequential(
        full,
        short,
        spent["full"] * 1000 / runs,
        spent["short"] * 1000 / runs,
        stub_spent["full"] * 1000 / runs,
        stub_spent["short"] * 1000 / runs,
        thread_jobs,
    )


@dataclass
class Batch:
    latency: float
    wall_s: float
    lags_ms: list[float]
    samples: list[RunSample]
    cpu_per_run_ms: float
    loop_cpu_per_run_ms: float
    # Ticks that came more than STALL_MS late: their total wall time, and the loop thread's CPU within them.
    stalled_s: float
    stalled_loop_cpu_s: float


async def concurrent(
    engine: RuntimeEngine, ctx: RequestContext, concurrency: int, history: int, latency: float
) -> Batch:
    slow = latency > 0
    sessions = [await new_session(engine, ctx, history) for _ in range(concurrency)]
    text = f"{FULL}{SLOW if slow else ''} What is (17.5 * 4 + 3) / 7?"
    lags: list[float] = []
    stalls: list[tuple[float, float]] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            started, loop_cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(TICK_SECONDS)
            now = time.perf_counter()
            lag = max(0.0, now - started - TICK_SECONDS) * 1000
            lags.append(lag)
            if lag > STALL_MS:
                # Was the loop thread busy (its own CPU) or waiting to run (GIL hand-off, a busy machine)?
                stalls.append((now - started, time.thread_time() - loop_cpu))

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    cpu0, loop0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    samples = await asyncio.gather(*(run_once(engine, ctx, s, text) for s in sessions))
    wall = time.perf_counter() - t0
    cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
    stop.set()
    await tick
    stalled, stalled_cpu = sum(s[0] for s in stalls), sum(s[1] for s in stalls)
    per_run = (cpu * 1000 / concurrency, loop * 1000 / concurrency)
    return Batch(latency, wall, lags, list(samples), *per_run, stalled, stalled_cpu)


# Coroutines timed by --breakdown: (module, class or None, attribute, label). Nested: the LLM calls and the
# recorder's tool rows run inside run_turn (patched where the run service looks it up).
BREAKDOWN_TARGETS = (
    ("agent_runtime.engine.runs.service", "RunService", "start", "RunService.start (until RUN_STARTED)"),
    ("agent_runtime.engine.conversation.chat_memory", "MessageWindowChatMemory", "window", "memory window"),
    ("agent_runtime.engine.runs.turn.runner", None, "run_turn", "run_turn (all stages)"),
    ("agent_runtime.engine.llm.client", "LLMClient", "complete_streaming", "flow > LLMClient.complete_streaming"),
    ("agent_runtime.engine.llm.client", "LLMClient", "complete", "flow > LLMClient.complete"),
    ("agent_runtime.engine.runs.gateway.recorder", "RunRecorder", "tool_calls", "flow > RunRecorder.tool_calls"),
    (
        "agent_runtime.engine.runs.gateway.recorder",
        "RunRecorder",
        "flush_tool_results",
        "flow > RunRecorder.flush_tool_results",
    ),
    ("agent_runtime.engine.runs.ledger.store", "RunStore", "finish", "RunStore.finish"),
)


def instrument(spent: defaultdict[str, float], calls: Counter[str]) -> None:
    """Wrap the coroutines above to add up the process CPU spent inside each (diagnostic; after the tables)."""
    import importlib

    def timed(original: Any, label: str) -> Any:
        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            cpu0 = time.process_time()
            try:
                return await original(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - cpu0
                calls[label] += 1

        return wrapper

    for module_name, class_name, attribute, label in BREAKDOWN_TARGETS:
        module = importlib.import_module(module_name)
        owner = getattr(module, class_name) if class_name else module
        setattr(owner, attribute, timed(getattr(owner, attribute), label))


async def breakdown(engine: RuntimeEngine, ctx: RequestContext, runs: int, history: int) -> None:
    spent: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    instrument(spent, calls)
    labels = [label for *_, label in BREAKDOWN_TARGETS]
    columns: dict[str, dict[str, float]] = {}
    for kind, text in (("full", f"{FULL} What is (17.5 * 4 + 3) / 7?"), ("short", f"{SHORT} Hi, how are you?")):
        session = await new_session(engine, ctx, history)
        await run_once(engine, ctx, session, text)
        spent.clear()
        calls.clear()
        total = 0.0
        for _ in range(runs):
            cpu0 = time.process_time()
            await run_once(engine, ctx, session, text)
            await asyncio.sleep(0.01)
            total += time.process_time() - cpu0
        column = {label: spent[label] * 1000 / runs for label in labels}
        column |= {f"calls {label}": calls[label] / runs for label in labels}
        column["total"] = total * 1000 / runs
        columns[kind] = column
    # A target the run path stopped calling would read 0.0 forever: a renamed coroutine, not a free one.
    unused = [label for label in labels if not any(c[f"calls {label}"] for c in columns.values())]
    if unused:
        raise SystemExit(f"--breakdown: never called on either route, update BREAKDOWN_TARGETS: {', '.join(unused)}")
    print(f"\nBreakdown (--breakdown): process CPU ms per run inside each coroutine, mean of {runs} sequential runs")
    rows = []
    for label in [*labels, "total"]:
        cells = [label]
        for kind in ("full", "short"):
            count = columns[kind].get(f"calls {label}")
            cells.append(f"{columns[kind][label]:.1f}" + (f" ({count:g}x)" if count else ""))
        rows.append(cells)
    llm: tuple[str, ...] = (
        "flow > LLMClient.complete_streaming",
        "flow > LLMClient.complete",
        "flow > RunRecorder.tool_calls",
    )
    llm += ("flow > RunRecorder.flush_tool_results",)
    rest = [f"{c['run_turn (all stages)'] - sum(c[k] for k in llm):.1f}" for c in columns.values()]
    rows.append(["run_turn minus its LLM calls and rows (the Flow, stages, gateway, tool)", *rest])
    _table(["component", "full", "short"], rows)


async def soak(engine: RuntimeEngine, ctx: RequestContext, seconds: float, history: int) -> int:
    session = await new_session(engine, ctx, history)
    print(f"soak: pid {os.getpid()}, full flows for {seconds:g} s", file=sys.stderr, flush=True)
    deadline, count = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        await run_once(engine, ctx, session, f"{FULL} What is (17.5 * 4 + 3) / 7?")
        count += 1
    return count


# -- report -----------------------------------------------------------------------------------------------


def _verdict(value: float, target: float) -> str:
    return f"{'PASS' if value <= target else 'MISS'} (≤ {target:g})"


def _table(head: list[str], rows: list[list[str]]) -> None:
    """A Markdown table: the first column left-aligned, the numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "| " + " | ".join(padded) + " |"

    print(line(head))
    print("|" + "|".join(":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|")
    for row in rows:
        print(line(row))


def report(seq: Sequential, batches: list[Batch], header: str) -> None:
    print(header)
    runs = len(seq.full)
    print(f"\nSequential runs, {runs} of each kind, stub answering at once (the stub's own CPU is not included):")
    head = ["flow", "CPU ms p50", "p90", "batch mean", "loop thread", "stub (apart)", "wall ms p50"]
    head += ["RUN_STARTED ms p50", "p90", "1st TEXT ms p50", "p90", "CPU target"]
    rows = []
    for name, samples, batch_ms, stub_ms, target in (
        ("full (4 calls)", seq.full, seq.full_batch_ms, seq.stub_full_ms, TARGET_FULL_MS),
        ("short (1 call)", seq.short, seq.short_batch_ms, seq.stub_short_ms, TARGET_SHORT_MS),
    ):
        cpu = [s.cpu_ms for s in samples]
        started = [s.to_started_ms for s in samples]
        text = [s.to_text_ms for s in samples]
        rows.append(
            [
                name,
                f"{statistics.median(cpu):.1f}",
                f"{_pct(cpu, 0.9):.1f}",
                f"{batch_ms:.1f}",
                f"{statistics.median(s.loop_cpu_ms for s in samples):.1f}",
                f"{stub_ms:.1f}",
                f"{statistics.median(s.wall_s for s in samples) * 1000:.1f}",
                f"{statistics.median(started):.1f}",
                f"{_pct(started, 0.9):.1f}",
                f"{statistics.median(text):.1f}",
                f"{_pct(text, 0.9):.1f}",
                _verdict(statistics.median(cpu), target),
            ]
        )
    _table(head, rows)
    for kind, jobs in seq.thread_jobs.items():
        pools = ", ".join(f"{pool} {count / runs:.1f}" for pool, count in sorted(jobs.items())) or "none"
        print(f"thread hand-offs per {kind} run (jobs handed to a thread pool, by pool): {pools}")
    if not batches:
        return
    concurrency = len(batches[0].samples)
    print(f"\n{concurrency} full runs at once on {concurrency} sessions; ticker sleeping {TICK_SECONDS * 1000:g} ms:")
    head = ["stub latency/call", "wall s", "ideal s", "CPU ms/run", "loop thread ms/run", "lag ms p50", "p99", "max"]
    head += [f"stalled >{STALL_MS:g} ms: s", "loop thread on CPU", "1st TEXT s p50", "p90", "lag target"]
    rows = []
    for batch in batches:
        lags = batch.lags_ms
        text = [s.to_text_ms / 1000 for s in batch.samples]
        rows.append(
            [
                f"{batch.latency:g} s",
                f"{batch.wall_s:.2f}",
                f"{MODEL_CALLS_FULL * batch.latency:.2f}",
                f"{batch.cpu_per_run_ms:.1f}",
                f"{batch.loop_cpu_per_run_ms:.1f}",
                f"{statistics.median(lags):.1f}",
                f"{_pct(lags, 0.99):.1f}",
                f"{max(lags):.1f}",
                f"{batch.stalled_s:.2f}",
                f"{batch.stalled_loop_cpu_s / batch.stalled_s * 100:.0f}%" if batch.stalled_s else "—",
                f"{statistics.median(text):.2f}",
                f"{_pct(text, 0.9):.2f}",
                _verdict(_pct(lags, 0.99), TARGET_LAG_P99_MS) if batch.latency == 0 else "—",
            ]
        )
    _table(head, rows)


# -- main -------------------------------------------------------------------------------------------------


async def bench(dsn: str, stub: StubProcess, args: argparse.Namespace) -> None:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.runtime import open_engine
    from agent_runtime.settings import Settings

    settings = Settings(
        _env_file=None,
        environment="test",
        database_url=dsn,
        data_dir=Path(tempfile.mkdtemp(prefix="agent-runtime-bench-flow-")),
        llm_model=MODEL,
        llm_api_base=stub.base_url,
        deepseek_api_key=API_KEY,
        openai_api_key=None,
        llm_max_retries=0,
        # One run's cost, not the memory's: no summary call, no per-user quota in the way of the batches.
        memory_summary=False,
        max_runs_per_user_per_minute=0,
        max_sessions_per_user=0,
        # Every session of the batches belongs to one user.
        max_concurrent_runs_per_user=1000,
        user_daily_budget_cny=Decimal(0),
        user_monthly_budget_cny=Decimal(0),
    )
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    resources = await open_engine(settings)
    try:
        engine = resources.engine
        await engine.runs.ensure_warm()  # the warm-up: CrewAI and LiteLLM imported, the LLM client primed
        engine.runs.start_background()  # as the service's lifespan does: the loop's default executor among it
        startup = time.perf_counter() - t0
        ctx = RequestContext(user_id=uuid.uuid4())
        seq = await sequential(engine, ctx, stub, args.runs, args.history)
        batches = [await concurrent(engine, ctx, args.concurrency, args.history, 0.0)]
        if args.latency > 0:
            batches.append(await concurrent(engine, ctx, args.concurrency, args.history, args.latency))
        version = await engine.pool.fetchval("SHOW server_version")
        header = (
            f"engine start-up + warm_up {startup:.1f} s; PostgreSQL {version}; pool max "
            f"{settings.db_pool_max_size}; {args.history} history msgs/session; {args.chunk_chars} chars/chunk; "
            f"load average {load_before:.2f} at start, {os.getloadavg()[0]:.2f} at end, {os.cpu_count()} CPUs"
        )
        report(seq, batches, header)
        if args.breakdown > 0:
            await breakdown(engine, ctx, args.breakdown, args.history)
        if args.soak > 0:
            count = await soak(engine, ctx, args.soak, args.history)
            print(f"\nsoak: {count} full flows in {args.soak:g} s")
    finally:
        await resources.close()


async def main_async(args: argparse.Namespace) -> None:
    server = PgServer(admin_url=args.database_url, embedded=None) if args.database_url else await find_server()
    try:
        name = await create_database(server, prefix="agent_runtime_bench")
        try:
            stub = StubProcess(args.latency, args.chunk_chars)
            stub.start()
            try:
                await bench(server.url_for(name), stub, args)
            finally:
                stub.stop()
        finally:
            await drop_database(server, name)
            print(f"dropped database {name}", file=sys.stderr)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"admin URL of the server to create the database on ({LOCAL_SERVER})")
    parser.add_argument("--runs", type=int, default=20, help="measured sequential runs of each kind (20)")
    parser.add_argument("--concurrency", type=int, default=20, help="full runs at once, on as many sessions (20)")
    parser.add_argument("--latency", type=float, default=0.5, help="stub delay per model call, slow batch; 0 skips")
    parser.add_argument("--history", type=int, default=20, help="messages pre-filled in every session (20)")
    parser.add_argument("--chunk-chars", type=int, default=4, help="characters per streamed chunk (4 ~ 1 token)")
    parser.add_argument("--breakdown", type=int, default=10, help="then N instrumented runs of each kind (10; 0 skips)")
    parser.add_argument("--soak", type=float, default=0.0, help="then run full flows for this many seconds")
    args = parser.parse_args()
    if args.runs < 2 or args.concurrency < 1:
        parser.error("--runs must be at least 2 and --concurrency at least 1")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
