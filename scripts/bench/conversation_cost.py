"""What whole conversations cost under each memory policy, with DeepSeek's prefix cache; prints one table.

    uv run python scripts/bench/conversation_cost.py [--database-url URL] [--turns 25,100] [--langs en,zh]
                                                     [--tools no,yes] [--policies ...]

Scripted conversations (25 and 100 turns; without tools, or with a calculator turn every third turn; in English
and in Chinese) are replayed through the real run path (`open_engine`: migrations, asyncpg pool, RunService,
memory window, CrewAI flow, LLMClient over LiteLLM) on a throwaway database `agent_runtime_bench_<random>`
(dropped WITH (FORCE) at the end). The model is `tests/stubs/prefix_cache.py`: the DeepSeek stub billing
prefix-cache hits from bytes as DeepSeek documents them (64-token units; a token is 4 bytes of the serialised
request, an approximation stated there). Each conversation gets its own, empty cache. The stub answers each
stage deterministically (same words for every policy), so the policies differ only in what memory sends.

Policies (`MEMORY_*` settings): `no window` (everything, 10,000 messages), `sliding` (today's window: 20
messages / 8,000 tokens, cut one turn at a time: low-water marks equal to the high-water ones), `cache-aware`
(20 / 8,000, cut to 10 / 4,000 and kept until full again), `cache-aware + summary` (the same with a summary of
the cut turns, one extra model call per cut). Columns: prompt tokens of all calls; cache-hit tokens and ratio;
the largest single prompt; CNY per conversation (the session's usage, summed by SQL from the rows the run path
recorded: 0.2 CNY per million cache-hit tokens, 2 per million missed, 3 per million output); model calls; cuts;
and the first call of each turn (the intent stage): its lowest and median cache-hit ratio from turn 2 on, cut
turns excluded, and how many such turns are under 60 %.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall  # noqa: E402
from tests.stubs.prefix_cache import PrefixCache, PrefixCacheStub  # noqa: E402
from tests.support.database import LOCAL_SERVER, PgServer, create_database, drop_database, find_server  # noqa: E402

if TYPE_CHECKING:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.runtime import RuntimeEngine

API_KEY = "sk-bench-cost"
MODEL = "deepseek/deepseek-flash"
_HIGH = {"memory_max_messages": 20, "memory_max_tokens": 8000}
POLICIES: dict[str, dict[str, Any]] = {
    "no window": {
        "memory_max_messages": 10_000,
        "memory_max_tokens": 10_000_000,
        "memory_low_messages": 10_000,
        "memory_low_tokens": 10_000_000,
        "memory_summary": False,
    },
    "sliding": {**_HIGH, "memory_low_messages": 20, "memory_low_tokens": 8000, "memory_summary": False},
    "cache-aware": {**_HIGH, "memory_low_messages": 10, "memory_low_tokens": 4000, "memory_summary": False},
    "cache-aware + summary": {**_HIGH, "memory_low_messages": 10, "memory_low_tokens": 4000, "memory_summary": True},
}

# -- the scripted conversation ------------------------------------------------------------------------------

TOPICS = {
    "en": [
        "baking sourdough bread",
        "learning the Rust language",
        "a week-long trip to Kyoto",
        "training for a first marathon",
        "keeping basil alive indoors",
        "saving for a used electric car",
        "teaching a child to ride a bike",
        "choosing a mechanical keyboard",
    ],
    "zh": [
        "做酸面包",
        "学习 Rust 语言",
        "去京都旅行一周",
        "准备第一次跑马拉松",
        "在室内养罗勒",
        "攒钱买二手电动车",
        "教孩子骑自行车",
        "挑选机械键盘",
    ],
}
ASPECTS = {
    "en": ["the first steps", "the most common mistakes", "what it costs", "how long it takes"],
    "zh": ["第一步该做什么", "最常见的错误", "大概要花多少钱", "需要多长时间"],
}


def user_text(lang: str, turn: int, tools: bool) -> str:
    topic, aspect = TOPICS[lang][turn % 8], ASPECTS[lang][turn % 4]
    if tools and turn % 3 == 2:
        if lang == "zh":
            return f"第 {turn} 轮：关于{topic}的预算，请帮我计算 (17.5 * {turn} + 3) / 7 是多少。"
        return f"Turn {turn}: for my {topic} budget, please calculate (17.5 * {turn} + 3) / 7 exactly."
    if lang == "zh":
        return f"第 {turn} 轮：我对{topic}很感兴趣。你能讲讲{aspect}吗？再给我两个实用的小建议。"
    return f"Turn {turn}: I am curious about {topic}. Could you explain {aspect} and give me two practical tips?"


def answer_text(lang: str, request: str) -> str:
    if lang == "zh":
        return (
            f"关于“{request[:40]}”：先把目标拆成每周能完成的小步骤，记录每一次的结果，再根据记录调整计划。"
            "第一个建议是从最简单的版本开始，不要一开始就买昂贵的装备；第二个建议是找一个有经验的朋友或社区，"
            "遇到问题时可以及时请教。大多数人在头两周进步最快，之后会遇到平台期，这很正常，坚持下去就好。"
        )
    return (
        f'About "{request[:60]}": break the goal into small weekly steps, write down what happened each time, '
        "and adjust the plan from those notes. First tip: start with the simplest version and do not buy expensive "
        "gear before you know you will stick with it. Second tip: find someone experienced, a friend or a local "
        "group, to ask when you get stuck. Most people improve fastest in the first two weeks and then hit a "
        "plateau; that is normal, and steady practice gets you through it."
    )


def _latest_user_words(task: str) -> str:
    prefix = "The user's latest message (a JSON string): "
    for line in task.splitlines():
        if prefix in line:
            return str(json.loads(line.split(prefix, 1)[1]))
    return ""


def respond(request: RecordedRequest) -> StubReply:
    """Each stage's answer, from the stage's task (the last user message) and what follows it."""
    messages = request.messages
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    task = str(messages[last_user].get("content"))
    lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in task) else "en"
    if '"title":"ConversationSummary"' in task:
        said = [str(m["content"])[:80] for m in messages[1:last_user] if m.get("role") == "user"]
        lead = "用户之前问过：" if lang == "zh" else "Earlier the user asked about: "
        return StubReply(content=json.dumps({"summary": lead + " | ".join(said)[:900]}, ensure_ascii=False))
    words = _latest_user_words(task)
    stage = task.split("\n", 1)[0]  # the stage request starts with "Stage: <name>"
    if stage == "Stage: intent":
        if "calculate" in words or "计算" in words:
            payload: dict[str, Any] = {
                "route": "NEEDS_EXECUTION",
                "assistant_text": None,
                "intent_summary": f"Calculate for: {words[:60]}",
                "execution_brief": f"Evaluate the expression in: {words}",
                "safety_flags": [],
            }
        else:
            payload = {
                "route": "DIRECT_EXECUTION",
                "assistant_text": answer_text(lang, words),
                "intent_summary": f"Advice on: {words[:60]}",
                "safety_flags": [],
            }
        return StubReply(content=json.dumps(payload, ensure_ascii=False))
    if stage == "Stage: execution":
        results = [m for m in messages[last_user:] if m.get("role") == "tool"]
        if not results:
            expression = words[words.index("(") : words.index("7") + 1] if "(" in words else "1+1"
            arguments = json.dumps({"expression": expression})
            return StubReply(
                tool_calls=[StubToolCall(id=f"call_{abs(hash(words)) % 10**8}", name="calculator", arguments=arguments)]
            )
        payload = {
            "status": "SUCCESS",
            "execution_summary": "Evaluated the expression with the calculator.",
            "execution_data": {"result": str(results[-1].get("content"))},
            "report_brief": "Give the user the exact result.",
        }
        return StubReply(content=json.dumps(payload, ensure_ascii=False))
    text = (
        "结果已经算好了，详见上面的数字。" if lang == "zh" else "The result is computed exactly; see the number above."
    )
    return StubReply(content=json.dumps({"assistant_text": text, "response_metadata": {}}, ensure_ascii=False))


# -- measuring ----------------------------------------------------------------------------------------------


@dataclass
class Conversation:
    policy: str
    turns: int
    tools: bool
    lang: str
    prompt_tokens: int = 0
    hit_tokens: int = 0
    largest_prompt: int = 0
    cost: Decimal = Decimal(0)
    model_calls: int = 0
    cuts: int = 0
    opening_prompt: int = 0
    first_ratios: list[float] = field(default_factory=list)


async def run_turn(engine: RuntimeEngine, ctx: RequestContext, session_id: uuid.UUID, text: str) -> None:
    from agent_runtime.engine.memory.messages import UserMessage
    from agent_runtime.engine.runs.models import RunInput

    handle = await engine.runs.start(ctx, session_id, RunInput(new_messages=[UserMessage(content=text)]))
    # The run's stored log: each event is its AG-UI JSON (`data`); the last one is terminal.
    async for event in handle.events.stream():
        if event.terminal:
            if json.loads(event.data)["type"] != "RUN_FINISHED":
                raise RuntimeError(f"run failed: {event.data}")
            return


async def conversation(
    engine: RuntimeEngine, stub: PrefixCacheStub, policy: str, turns: int, tools: bool, lang: str
) -> Conversation:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.sessions.models import SessionCreate

    ctx = RequestContext(user_id=uuid.uuid4())
    session = await engine.sessions.create(ctx, SessionCreate(title="bench"))
    stub.cache, stub.accounts = PrefixCache(), []
    stub.requests.clear()
    result = Conversation(policy, turns, tools, lang)
    marks = "SELECT count(*) FROM agent_memory_windows WHERE session_id = $1 AND user_id = $2"
    for turn in range(turns):
        before_requests, before_marks = len(stub.requests), await engine.pool.fetchval(marks, session.id, ctx.user_id)
        await run_turn(engine, ctx, session.id, user_text(lang, turn, tools))
        cut = await engine.pool.fetchval(marks, session.id, ctx.user_id) != before_marks
        calls = list(zip(stub.requests[before_requests:], stub.accounts[before_requests:], strict=True))
        summaries = sum(1 for request, _ in calls if "ConversationSummary" in str(request.messages[-1].get("content")))
        result.cuts += int(cut)
        _, first = calls[summaries]
        if turn >= 1 and not cut:
            result.first_ratios.append(first.hit_tokens / first.prompt_tokens)
    usage = await engine.usage.for_session(ctx, session.id)
    result.prompt_tokens, result.hit_tokens = usage.total.input_tokens, usage.total.cached_tokens
    result.cost, result.model_calls = usage.total.cost, usage.total.model_calls
    result.largest_prompt = max(a.prompt_tokens for a in stub.accounts)
    result.opening_prompt = stub.accounts[0].prompt_tokens
    return result


def _row(c: Conversation) -> list[str]:
    ratios = c.first_ratios
    return [
        c.policy,
        f"{c.prompt_tokens:,}",
        f"{c.hit_tokens:,} ({100 * c.hit_tokens / c.prompt_tokens:.1f} %)",
        f"{c.largest_prompt:,}",
        f"{c.cost:.4f}",
        str(c.model_calls),
        str(c.cuts),
        f"{100 * min(ratios):.0f} / {100 * statistics.median(ratios):.0f} %" if ratios else "-",
        str(sum(1 for r in ratios if r < 0.6)),
    ]


def report(results: list[Conversation]) -> None:
    head = [
        "policy",
        "prompt tokens",
        "cache-hit tokens",
        "largest prompt",
        "CNY",
        "calls",
        "cuts",
        "1st call hit min / median",
        "1st calls < 60 %",
    ]
    groups: dict[tuple[int, bool, str], list[Conversation]] = {}
    for c in results:
        groups.setdefault((c.turns, c.tools, c.lang), []).append(c)
    for (turns, tools, lang), rows in groups.items():
        opening = rows[0].opening_prompt
        print(
            f"\n{turns} turns, {'tools every 3rd turn' if tools else 'no tools'}, {lang} (turn 1's request: {opening})"
        )
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        base = {c.policy: c.cost for c in rows}
        for c in rows:
            print("| " + " | ".join(_row(c)) + " |")
        if "sliding" in base:
            for name, cost in base.items():
                if name.startswith("cache-aware"):
                    print(f"  {name}: {100 * (1 - cost / base['sliding']):.1f} % below sliding", end="")
                    if "no window" in base:
                        print(f", {100 * (1 - cost / base['no window']):.1f} % below no window", end="")
                    print()
    sys.stdout.flush()


async def bench(dsn: str, args: argparse.Namespace) -> None:
    from agent_runtime.engine.runtime import open_engine
    from agent_runtime.settings import Settings

    results: list[Conversation] = []
    async with PrefixCacheStub(api_key=API_KEY, responder=respond) as stub:
        for policy in args.policies:
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None,
                environment="test",
                database_url=dsn,
                data_dir=Path(tempfile.mkdtemp(prefix="agent-runtime-bench-cost-")),
                llm_model=MODEL,
                llm_api_base=stub.base_url,
                deepseek_api_key=API_KEY,
                openai_api_key=None,
                llm_max_retries=0,
                run_timeout_seconds=600,
                # One user replays 100 turns back to back: the per-user quotas (0 = none) would stop it.
                max_runs_per_user_per_minute=0,
                user_daily_budget_cny=0,
                user_monthly_budget_cny=0,
                **POLICIES[policy],
            )
            resources = await open_engine(settings)
            try:
                engine = resources.engine
                await engine.runs.ensure_warm()
                for turns in args.turns:
                    for tools in args.tools:
                        for lang in args.langs:
                            t0 = time.perf_counter()
                            results.append(await conversation(engine, stub, policy, turns, tools, lang))
                            print(
                                f"{policy}: {turns} turns, tools={tools}, {lang}: {time.perf_counter() - t0:.0f} s",
                                file=sys.stderr,
                            )
            finally:
                await resources.close()
    order = {name: i for i, name in enumerate(POLICIES)}
    report(sorted(results, key=lambda c: (c.turns, c.tools, c.lang, order[c.policy])))


async def main_async(args: argparse.Namespace) -> None:
    server = PgServer(admin_url=args.database_url, embedded=None) if args.database_url else await find_server()
    try:
        name = await create_database(server, prefix="agent_runtime_bench")
        try:
            await bench(server.url_for(name), args)
        finally:
            await drop_database(server, name)
            print(f"dropped database {name}", file=sys.stderr)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


def _list(kind: type, allowed: list[str] | None = None) -> Any:
    def parse(text: str) -> list[Any]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if allowed is not None and any(item not in allowed for item in items):
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}")
        return [kind(item) for item in items]

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"admin URL of the server to create the database on ({LOCAL_SERVER})")
    parser.add_argument("--turns", type=_list(int), default=[25, 100], help="conversation lengths (25,100)")
    parser.add_argument("--langs", type=_list(str, ["en", "zh"]), default=["en", "zh"], help="languages (en,zh)")
    parser.add_argument("--tools", type=_list(str, ["no", "yes"]), default=["no", "yes"], help="tool turns (no,yes)")
    parser.add_argument(
        "--policies",
        type=lambda t: _list(str, list(POLICIES))(t.replace(";", ",")),
        default=list(POLICIES),
        help="comma-separated, from: " + ", ".join(POLICIES),
    )
    parser.add_argument(
        "--low", type=_list(int), help="MESSAGES,TOKENS: the cache-aware policies' low-water marks (10,4000)"
    )
    args = parser.parse_args()
    args.tools = [t == "yes" for t in args.tools]
    if args.low:
        for name in ("cache-aware", "cache-aware + summary"):
            POLICIES[name].update(memory_low_messages=args.low[0], memory_low_tokens=args.low[1])
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
