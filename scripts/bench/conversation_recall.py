"""What the model remembers of a long conversation, and what that costs, under memory configurations; prints tables.

    uv run python scripts/bench/conversation_recall.py [--database-url URL] [--turns 100] [--tools no,yes]
                                                       [--configurations ...] [--intervals 64,256,1024,4096]

A scripted conversation (conversation_cost.py's, in English) in which every 5th user message also states a distinct
fact about the user ("my <thing> is <value>."), without tools or with a calculator turn in three, replayed through
the real run path on a throwaway database, against the DeepSeek prefix-cache stub (tests/stubs/prefix_cache.py:
hits in whole 64-token blocks, fixed units every `--intervals` tokens, tools cached with the system turn). The stub
answers the memory's summary task extractively (tests/stubs/summaries.py, the demo model's own summary).

At every turn the first model call's input is searched for each fact planted before (its value, verbatim or inside
the summary) and for the previous 3 exchanges (user words and answer, verbatim). Columns: facts that reached the
model over all turns (of those planted before each turn) and at the last turn; turns whose first call had the last
3 exchanges; CNY at peak and off-peak after 10, 30 and the last turn (each a prefix of the same conversation); the
first call's cache-hit share from the third turn on (min / median); cuts. Long-term memory is on, as shipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conversation_cost as cost  # noqa: E402
from tests.stubs.deepseek_stub import RecordedRequest, StubReply  # noqa: E402
from tests.stubs.prefix_cache import PrefixCacheStub  # noqa: E402
from tests.stubs.summaries import summary_reply  # noqa: E402
from tests.support.database import LOCAL_SERVER, PgServer, create_database, drop_database, find_server  # noqa: E402

if TYPE_CHECKING:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.runtime import RuntimeEngine

CHECKPOINTS = (10, 30)
EXCHANGES = 3
THINGS = [
    ("sister's name", "Alma"),
    ("flight number", "SK-4711"),
    ("dog's name", "Pixel"),
    ("home town", "Tromsø"),
    ("favourite tea", "lapsang souchong"),
    ("bike", "a blue Brompton"),
    ("employer", "Nordlys Energy"),
    ("allergy", "hazelnuts"),
    ("car plate", "EV 42817"),
    ("daughter's school", "Solberg skole"),
    ("budget for the trip", "18,400 kroner"),
    ("piano teacher", "Mrs Okafor"),
    ("blood type", "AB negative"),
    ("landlord", "Mr Haugen"),
    ("gym locker", "number 213"),
    ("wedding date", "14 June"),
    ("favourite author", "Tove Jansson"),
    ("bank", "Sparebank Vest"),
    ("cat's vet", "Dr Lindqvist"),
    ("running club", "the Fjellstien Runners"),
]
CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "shipped": {},
    "shipped without a head": {"memory_head_tokens": 0},
    "shipped at 8k": {"memory_max_tokens": 8_000},
    "shipped at 10k": {"memory_max_tokens": 10_000},
    "shipped at 16k": {"memory_max_tokens": 16_000},
    "before (newest turn only, no summary)": {
        "memory_max_tokens": 8_000,
        "memory_keep_exchanges": 0,
        "memory_summary": False,
        "memory_head_tokens": 0,
    },
    "no window": {
        "memory_max_messages": 100_000,
        "memory_max_tokens": 10_000_000,
        "memory_low_messages": 100_000,
        "memory_low_tokens": 10_000_000,
        "memory_summary": False,
    },
}


def fact_of(turn: int) -> tuple[str, str] | None:
    return THINGS[(turn // 5) % len(THINGS)] if turn % 5 == 4 else None


def user_text(turn: int, tools: bool) -> str:
    text = cost.user_text("en", turn, tools)
    fact = fact_of(turn)
    if fact is None:
        return text
    thing, value = fact
    return f"Turn {turn}: my {thing} is {value}. {text.split(': ', 1)[1]}"


def respond(request: RecordedRequest) -> StubReply:
    return summary_reply(request) or cost.respond(request)


@dataclass
class Recall:
    label: str
    tools: bool
    interval: int
    turns: int
    reached: int = 0
    planted: int = 0
    at_last: str = ""
    with_exchanges: int = 0
    costs: dict[int, tuple[Decimal, Decimal]] = field(default_factory=dict)
    first_ratios: list[float] = field(default_factory=list)
    cuts: int = 0


def _contents(request: RecordedRequest) -> list[tuple[str, str]]:
    return [(str(m.get("role")), str(m.get("content") or "")) for m in request.messages]


def _has_exchanges(request: RecordedRequest, earlier: list[tuple[str, str]]) -> bool:
    """The last `EXCHANGES` (user words, answer) pairs are in the input verbatim and in order."""
    wanted = earlier[-EXCHANGES:]
    messages = _contents(request)
    at = 0
    for said, answer in wanted:
        user_at = next(
            (i for i in range(at, len(messages)) if messages[i][0] == "user" and said in messages[i][1]), None
        )
        if user_at is None:
            return False
        answer_at = next((i for i in range(user_at + 1, len(messages)) if messages[i][1] == answer), None)
        if answer_at is None:
            return False
        at = answer_at + 1
    return True


async def _answer_text(engine: RuntimeEngine, ctx: RequestContext, session_id: uuid.UUID) -> str:
    from tests.support.rows import stored_rows

    rows = [r for r in await stored_rows(engine.pool, ctx, session_id) if r.role == "assistant" and r.seq > 0]
    return str(rows[-1].content)


async def _costs(engine: RuntimeEngine, ctx: RequestContext, session_id: uuid.UUID) -> tuple[Decimal, Decimal]:
    usage = await engine.usage.for_session(ctx, session_id)
    return usage.total.cost, await cost.off_peak_cost(engine, ctx, session_id)


MARKS_SQL = "SELECT count(*) FROM agent_memory_windows WHERE session_id = $1 AND user_id = $2"


async def conversation(engine: RuntimeEngine, stub: PrefixCacheStub, result: Recall) -> Recall:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.sessions.models import SessionCreate

    ctx = RequestContext(user_id=uuid.uuid4())
    session = await engine.sessions.create(ctx, SessionCreate(title="recall"))
    stub.requests.clear()
    stub.accounts.clear()
    earlier: list[tuple[str, str]] = []
    planted: list[str] = []
    for turn in range(result.turns):
        text = user_text(turn, result.tools)
        before, marks = len(stub.requests), await engine.pool.fetchval(MARKS_SQL, session.id, ctx.user_id)
        await cost.run_turn(engine, ctx, session.id, text)
        await engine.memories.wait_idle()
        result.cuts += int(await engine.pool.fetchval(MARKS_SQL, session.id, ctx.user_id) != marks)
        calls = list(zip(stub.requests[before:], stub.accounts[before:], strict=True))
        first, account = next((r, a) for r, a in calls if cost._stage(r) not in ("summary", "extraction"))
        seen = "\n".join(content for _, content in _contents(first))
        reached = [value for value in planted if value in seen or json.dumps(value)[1:-1] in seen]
        result.reached += len(reached)
        result.planted += len(planted)
        if turn == result.turns - 1:
            result.at_last = f"{len(reached)} / {len(planted)}"
        if len(earlier) < EXCHANGES or _has_exchanges(first, earlier):
            result.with_exchanges += 1
        if turn >= 2:
            result.first_ratios.append(account.hit_tokens / account.prompt_tokens)
        fact = fact_of(turn)
        if fact is not None:
            planted.append(fact[1])
        earlier.append((text, await _answer_text(engine, ctx, session.id)))
        if turn + 1 in CHECKPOINTS or turn + 1 == result.turns:
            result.costs[turn + 1] = await _costs(engine, ctx, session.id)
    return result


async def measure(dsn: str, label: str, settings: dict[str, Any], tools: bool, interval: int, turns: int) -> Recall:
    from agent_runtime.engine.runtime import open_engine
    from agent_runtime.settings import Settings

    async with PrefixCacheStub(api_key=cost.API_KEY, responder=respond, interval_tokens=interval) as stub:
        configured = Settings(
            _env_file=None,
            environment="test",
            database_url=dsn,
            data_dir=Path(tempfile.mkdtemp(prefix="agent-runtime-bench-recall-")),
            llm_model=cost.MODEL,
            llm_api_base=stub.base_url,
            deepseek_api_key=cost.API_KEY,
            openai_api_key=None,
            llm_max_retries=0,
            run_timeout_seconds=600,
            max_runs_per_user_per_minute=0,
            user_daily_budget_cny=0,
            user_monthly_budget_cny=0,
            **settings,
        )
        resources = await open_engine(configured, clock=lambda: cost.PEAK)
        try:
            await resources.engine.runs.ensure_warm()
            t0 = time.perf_counter()
            result = await conversation(resources.engine, stub, Recall(label, tools, interval, turns))
            print(f"{label}, tools={tools}, interval {interval}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            return result
        finally:
            await resources.close()


HEAD = [
    "configuration",
    "tools",
    "unit interval",
    "facts reached, all turns",
    "at the last turn",
    "turns with the last 3 exchanges",
    "CNY peak / off-peak at 10",
    "at 30",
    "at the last turn",
    "1st call hit, turn 3+: min / median",
    "cuts",
]


def _money(pair: tuple[Decimal, Decimal] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.4f} / {pair[1]:.4f}"


def row(r: Recall) -> list[str]:
    share = 100 * r.reached / r.planted if r.planted else 100.0
    ratios = r.first_ratios
    return [
        r.label,
        "a calculator turn in three" if r.tools else "no",
        f"{r.interval:,}",
        f"{r.reached:,} / {r.planted:,} ({share:.1f} %)",
        r.at_last,
        f"{r.with_exchanges} / {r.turns}",
        _money(r.costs.get(10)),
        _money(r.costs.get(30)),
        _money(r.costs.get(r.turns)),
        f"{100 * min(ratios):.1f} / {100 * statistics.median(ratios):.1f} %" if ratios else "-",
        str(r.cuts),
    ]


def report(results: list[Recall]) -> None:
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for r in results:
        print("| " + " | ".join(row(r)) + " |")
    for tools in sorted({r.tools for r in results}):
        same = [r for r in results if r.tools == tools and r.interval == results[0].interval]
        shipped = next((r for r in same if r.label == "shipped"), None)
        if shipped is None or len(same) < 2:
            continue
        for point in sorted(shipped.costs):
            for tier in (0, 1):
                cheapest = min(same, key=lambda r: r.costs[point][tier])
                ratio = shipped.costs[point][tier] / cheapest.costs[point][tier]
                name = "peak" if tier == 0 else "off-peak"
                print(f"tools={tools} at {point} turns, {name}: shipped {ratio:.3f}x the cheapest ({cheapest.label})")
    sys.stdout.flush()


async def main_async(args: argparse.Namespace) -> None:
    server = PgServer(admin_url=args.database_url, embedded=None) if args.database_url else await find_server()
    try:
        name = await create_database(server, prefix="agent_runtime_bench")
        try:
            dsn = server.url_for(name)
            results: list[Recall] = []
            first, *others = args.intervals
            for tools in args.tools:
                for label in args.configurations:
                    results.append(await measure(dsn, label, CONFIGURATIONS[label], tools, first, args.turns))
                for interval in others:
                    results.append(await measure(dsn, "shipped", {}, tools, interval, args.turns))
            report(results)
        finally:
            await drop_database(server, name)
            print(f"dropped database {name}", file=sys.stderr)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"admin URL of the server to create the database on ({LOCAL_SERVER})")
    parser.add_argument("--turns", type=int, default=100, help="conversation length (100)")
    parser.add_argument("--tools", type=cost._list(str, ["no", "yes"]), default=["no", "yes"], help="(no,yes)")
    parser.add_argument(
        "--configurations",
        type=lambda t: cost._list(str, list(CONFIGURATIONS))(t.replace(";", ",")),
        default=list(CONFIGURATIONS),
        help="comma-separated, from: " + ", ".join(CONFIGURATIONS),
    )
    parser.add_argument(
        "--intervals",
        type=cost._list(int),
        default=[1024, 64, 256, 4096],
        help="the stub's fixed-unit intervals in tokens; configurations compared at the first (1024,64,256,4096)",
    )
    args = parser.parse_args()
    args.tools = [t == "yes" for t in args.tools]
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
