"""What whole conversations cost under each memory policy, with DeepSeek's context cache; prints tables.

    uv run python scripts/bench/conversation_cost.py [--database-url URL] [--turns 10,30,100] [--langs en]
                                                     [--tools no,yes] [--policies ...] [--extras layout,users,thinking]

Scripted conversations (10, 30 and 100 turns; without tools, or with a calculator turn every third turn; in English
or Chinese) are replayed through the real run path (`open_engine`: migrations, asyncpg pool, RunService, memory
window, CrewAI flow, LLMClient over LiteLLM) on a throwaway database `agent_runtime_bench_<random>` (dropped WITH
(FORCE) at the end), with the service's clock pinned to a peak hour. The model is `tests/stubs/prefix_cache.py`: the
DeepSeek stub billing cache hits as DeepSeek documents its cache prefix units today (a request hits the longest unit
it repeats in full; units at the end of each input and output, at prefixes common to two requests, every 1,024
tokens; a token is 4 bytes of the serialised request: assumptions stated there). Each conversation is one new user,
so it starts with an empty cache of its own (DeepSeek isolates the cache per `user_id`). The stub answers each stage
deterministically (the same words for every policy), so the policies differ only in what memory sends.

Columns: prompt tokens of all calls; cache-hit tokens and share; the largest single prompt; CNY per conversation at
peak (the session's usage, summed by SQL from the rows the run path recorded) and off-peak (the same rows priced
again at the off-peak tier of their price entry); model calls; window cuts; and the first call of each turn from the
third turn on: its lowest and median cache-hit share. Long-term memory is on as shipped: each turn's extraction call
(answered with one fact per topic) counts in the cost and the calls, not as a turn's first call.

Extras: `layout` compares the shipped prompt layout (every call carries the run's tools) with tools only on the calls
that may call them; `users` prices the first turn of new users with and without the per-user cache isolation
(`user_id`); `thinking` compares thinking off (shipped) with thinking on for the execution stage and for every task,
with a scripted reasoning of `--reasoning-words` words per thinking call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall  # noqa: E402
from tests.stubs.prefix_cache import PrefixCacheStub  # noqa: E402
from tests.support.database import LOCAL_SERVER, PgServer, create_database, drop_database, find_server  # noqa: E402
from tests.support.rows import stored_rows  # noqa: E402

if TYPE_CHECKING:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.runtime import RuntimeEngine

API_KEY = "sk-bench-cost"
MODEL = "deepseek/deepseek-flash"
# Tuesday 10:30 in Beijing: deepseek-flash's peak prices (config/pricing.yaml).
PEAK = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
_EVERYTHING = {"memory_max_messages": 100_000, "memory_max_tokens": 10_000_000}
POLICIES: dict[str, dict[str, Any]] = {
    "no window": {
        **_EVERYTHING,
        "memory_low_messages": 100_000,
        "memory_low_tokens": 10_000_000,
        "memory_summary": False,
    },
    "sliding 20/8k": {
        "memory_max_messages": 20,
        "memory_max_tokens": 8000,
        "memory_low_messages": 20,
        "memory_low_tokens": 8000,
        "memory_summary": False,
    },
    "cut 20/8k to 10/4k": {
        "memory_max_messages": 20,
        "memory_max_tokens": 8000,
        "memory_low_messages": 10,
        "memory_low_tokens": 4000,
        "memory_summary": False,
    },
    "cut 20/8k to 10/4k + summary": {
        "memory_max_messages": 20,
        "memory_max_tokens": 8000,
        "memory_low_messages": 10,
        "memory_low_tokens": 4000,
        "memory_summary": True,
    },
    "cut 200/32k to 100/16k + summary": {
        "memory_max_messages": 200,
        "memory_max_tokens": 32_000,
        "memory_low_messages": 100,
        "memory_low_tokens": 16_000,
        "memory_summary": True,
    },
    # Deep cuts: a cut re-sends whatever it keeps at the cache-miss price (50x the hit price) once, and saves the
    # hit price of what it drops on every later call, so keeping little pays off within a few calls.
    "cut 400/12k to 2/1k + summary": {
        "memory_max_messages": 400,
        "memory_max_tokens": 12_000,
        "memory_low_messages": 2,
        "memory_low_tokens": 1000,
        "memory_summary": True,
    },
    "cut 400/16k to 4/1.5k + summary": {
        "memory_max_messages": 400,
        "memory_max_tokens": 16_000,
        "memory_low_messages": 4,
        "memory_low_tokens": 1500,
        "memory_summary": True,
    },
    "cut 400/12k to 2/1k": {
        "memory_max_messages": 400,
        "memory_max_tokens": 12_000,
        "memory_low_messages": 2,
        "memory_low_tokens": 1000,
        "memory_summary": False,
    },
    "cut 400/12k to 2/1k + summary 200": {
        "memory_max_messages": 400,
        "memory_max_tokens": 12_000,
        "memory_low_messages": 2,
        "memory_low_tokens": 1000,
        "memory_summary": True,
        "memory_summary_max_tokens": 200,
    },
    "cut 400/8k to 2/1k + summary 200": {
        "memory_max_messages": 400,
        "memory_max_tokens": 8_000,
        "memory_low_messages": 2,
        "memory_low_tokens": 1000,
        "memory_summary": True,
        "memory_summary_max_tokens": 200,
    },
    "cut 400/8k to 2/1k": {
        "memory_max_messages": 400,
        "memory_max_tokens": 8_000,
        "memory_low_messages": 2,
        "memory_low_tokens": 1000,
        "memory_summary": False,
    },
    "no window without long-term memory": {
        **_EVERYTHING,
        "memory_low_messages": 100_000,
        "memory_low_tokens": 10_000_000,
        "memory_summary": False,
        "user_memories_enabled": False,
    },
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


REPAIR = "Your previous answer could not be used"
REASONING_WORDS = 150


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]


def _stage(request: RecordedRequest) -> str:
    """As the flow writes it (engine/flow/prompt.py): a stage request names its stage; the user's turn is intent.
    The long-term memory extraction (engine/user_memories/extraction.py) is its own task, named by its contract."""
    if any(m.get("role") == "system" and "MemoryExtraction" in str(m.get("content")) for m in request.messages):
        return "extraction"
    last = _user_texts(request.messages)[-1]
    if '"title":"ConversationSummary"' in last:
        return "summary"
    for content in reversed(_user_texts(request.messages)):
        if content.startswith("Stage: "):
            return content.split("\n", 1)[0].removeprefix("Stage: ")
    return "intent"


def _words(request: RecordedRequest) -> str:
    """The user's turn: the last user message that is neither a stage request nor a repair."""
    turns = [t for t in _user_texts(request.messages) if not t.startswith(("Stage: ", REPAIR))]
    return turns[-1] if turns else ""


def _reasoning(request: RecordedRequest, lang: str) -> str | None:
    """A scripted chain of thought when the call thinks (the stub would otherwise write a one-line one)."""
    if not request.thinking_enabled:
        return None
    word = "想" if lang == "zh" else "think"
    return " ".join([word] * REASONING_WORDS)


def respond(request: RecordedRequest) -> StubReply:
    """Each stage's answer, from the user's turn and what follows the stage's request."""
    messages = request.messages
    words = _words(request)
    lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in words) else "en"
    thought = _reasoning(request, lang)
    stage = _stage(request)
    if stage == "extraction":
        # What a model would keep of "I am curious about <topic>": one fact per topic, nothing once it is known.
        turn_data = _user_texts(messages)[-1]
        known, _, said = turn_data.partition('"user_message"')
        topic = next((t for t in TOPICS[lang] if t in said), None)
        fact = f"The user is interested in {topic}." if lang == "en" else f"用户对{topic}感兴趣。"
        operations = [{"action": "add", "fact": fact}] if topic is not None and topic not in known else []
        return StubReply(content=json.dumps({"operations": operations}, ensure_ascii=False), reasoning_content=thought)
    if stage == "summary":
        asked = [t[:80] for t in _user_texts(messages)[:-1] if not t.startswith(("Stage: ", REPAIR))]
        lead = "用户之前问过：" if lang == "zh" else "Earlier the user asked about: "
        summary = json.dumps({"summary": lead + " | ".join(asked)[-900:]}, ensure_ascii=False)
        return StubReply(content=summary, reasoning_content=thought)
    if stage == "intent":
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
        return StubReply(content=json.dumps(payload, ensure_ascii=False), reasoning_content=thought)
    if stage == "execution":
        start = max(i for i, m in enumerate(messages) if str(m.get("content") or "").startswith("Stage: execution"))
        results = [m for m in messages[start:] if m.get("role") == "tool"]
        if not results:
            expression = words[words.index("(") : words.index("7") + 1] if "(" in words else "1+1"
            arguments = json.dumps({"expression": expression})
            digest = hashlib.sha256(words.encode()).hexdigest()[:8]
            call = StubToolCall(id=f"call_{digest}", name="calculator", arguments=arguments)
            return StubReply(tool_calls=[call], reasoning_content=thought)
        payload = {
            "status": "SUCCESS",
            "execution_summary": "Evaluated the expression with the calculator.",
            "execution_data": {"result": str(results[-1].get("content"))},
            "report_brief": "Give the user the exact result.",
        }
        return StubReply(content=json.dumps(payload, ensure_ascii=False), reasoning_content=thought)
    text = (
        "结果已经算好了，详见上面的数字。" if lang == "zh" else "The result is computed exactly; see the number above."
    )
    content = json.dumps({"assistant_text": text, "response_metadata": {}}, ensure_ascii=False)
    return StubReply(content=content, reasoning_content=thought)


# -- measuring ----------------------------------------------------------------------------------------------


@dataclass
class Conversation:
    label: str
    turns: int
    tools: bool
    lang: str
    prompt_tokens: int = 0
    hit_tokens: int = 0
    largest_prompt: int = 0
    cost: Decimal = Decimal(0)
    off_peak: Decimal = Decimal(0)
    model_calls: int = 0
    cuts: int = 0
    first_ratios: list[float] = field(default_factory=list)
    answer_reasoning_tokens: list[int] = field(default_factory=list)


async def run_turn(engine: RuntimeEngine, ctx: RequestContext, session_id: uuid.UUID, text: str) -> None:
    from agent_runtime.engine.conversation.chat_messages import UserMessage
    from agent_runtime.engine.runs.request.models import RunInput

    handle = await engine.runs.start(ctx, session_id, RunInput(new_messages=[UserMessage(content=text)]))
    # The run's stored log: each event is its AG-UI JSON (`data`); the last one is terminal.
    async for event in handle.events.stream():
        if event.terminal:
            if json.loads(event.data)["type"] != "RUN_FINISHED":
                raise RuntimeError(f"run failed: {event.data}")
            return


async def off_peak_cost(engine: RuntimeEngine, ctx: RequestContext, session_id: uuid.UUID) -> Decimal:
    """The session's rows priced again at the off-peak tier of the price entry each was charged by."""
    from agent_runtime.engine.billing.cost import recompute_cost
    from agent_runtime.engine.billing.models import LLMUsage
    from agent_runtime.engine.billing.pricing import PricingTable

    table = PricingTable.load(engine.settings.pricing_file)
    total = Decimal(0)
    for row in await stored_rows(engine.pool, ctx, session_id):
        meta = row.metadata.model_dump()
        if not (row.input_tokens or row.output_tokens) or meta.get("price_effective_from") is None:
            continue
        usage = LLMUsage(
            prompt_tokens=row.input_tokens,
            completion_tokens=row.output_tokens,
            total_tokens=row.input_tokens + row.output_tokens,
            cache_hit_tokens=meta.get("cached_tokens"),
        )
        total += recompute_cost(
            table, meta["model"], usage, tier="off_peak", effective_from=meta["price_effective_from"]
        ).cost
    return total


def _answer_call(requests: list[RecordedRequest]) -> RecordedRequest:
    """The turn's call that wrote the user's answer: organization on a tool turn, else intent."""
    stages = [_stage(r) for r in requests]
    return requests[max(i for i, stage in enumerate(stages) if stage in ("intent", "organization"))]


async def conversation(
    engine: RuntimeEngine, stub: PrefixCacheStub, label: str, turns: int, tools: bool, lang: str
) -> Conversation:
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.sessions.models import SessionCreate

    ctx = RequestContext(user_id=uuid.uuid4())  # a new user: its own, empty cache namespace
    session = await engine.sessions.create(ctx, SessionCreate(title="bench"))
    stub.requests.clear()
    stub.accounts.clear()
    result = Conversation(label, turns, tools, lang)
    marks = "SELECT count(*) FROM agent_memory_windows WHERE session_id = $1 AND user_id = $2"
    for turn in range(turns):
        before_requests, before_marks = len(stub.requests), await engine.pool.fetchval(marks, session.id, ctx.user_id)
        await run_turn(engine, ctx, session.id, user_text(lang, turn, tools))
        # The turn's memory extraction runs after RUN_FINISHED: counted with its turn, not the next one.
        await engine.memories.wait_idle()
        result.cuts += int(await engine.pool.fetchval(marks, session.id, ctx.user_id) != before_marks)
        calls = list(zip(stub.requests[before_requests:], stub.accounts[before_requests:], strict=True))
        _, first = next(
            (request, account) for request, account in calls if _stage(request) not in ("summary", "extraction")
        )
        if turn >= 2:
            result.first_ratios.append(first.hit_tokens / first.prompt_tokens)
        answer = _answer_call([request for request, _ in calls])
        thought = _reasoning(answer, lang) if answer.thinking_enabled else None
        result.answer_reasoning_tokens.append(len(thought.encode()) // 4 if thought else 0)
    usage = await engine.usage.for_session(ctx, session.id)
    result.prompt_tokens, result.hit_tokens = usage.total.input_tokens, usage.total.cached_tokens
    result.cost, result.model_calls = usage.total.cost, usage.total.model_calls
    result.off_peak = await off_peak_cost(engine, ctx, session.id)
    result.largest_prompt = max(a.prompt_tokens for a in stub.accounts)
    return result


HEAD = [
    "configuration",
    "prompt tokens",
    "cache-hit tokens",
    "largest prompt",
    "CNY peak",
    "CNY off-peak",
    "calls",
    "cuts",
    "1st call hit, turn 3+: min / median",
]


def _row(c: Conversation) -> list[str]:
    ratios = c.first_ratios
    return [
        c.label,
        f"{c.prompt_tokens:,}",
        f"{c.hit_tokens:,} ({100 * c.hit_tokens / c.prompt_tokens:.1f} %)",
        f"{c.largest_prompt:,}",
        f"{c.cost:.4f}",
        f"{c.off_peak:.4f}",
        str(c.model_calls),
        str(c.cuts),
        f"{100 * min(ratios):.1f} / {100 * statistics.median(ratios):.1f} %" if ratios else "-",
    ]


def report(title: str, results: list[Conversation], baseline: str | None = "no window") -> None:
    groups: dict[tuple[int, bool, str], list[Conversation]] = {}
    for c in results:
        groups.setdefault((c.turns, c.tools, c.lang), []).append(c)
    for (turns, tools, lang), rows in groups.items():
        print(f"\n{title}: {turns} turns, {'a calculator turn in three' if tools else 'no tools'}, {lang}")
        print("| " + " | ".join(HEAD) + " |")
        print("|" + "---|" * len(HEAD))
        for c in rows:
            print("| " + " | ".join(_row(c)) + " |")
        cheapest = min(rows, key=lambda c: c.cost)
        print(f"cheapest: {cheapest.label}", end="")
        base = next((c for c in rows if c.label == baseline), None)
        if base is not None:
            print(
                " ("
                + ", ".join(f"{c.label} {100 * (1 - c.cost / base.cost):+.1f} %" for c in rows)
                + f" below {baseline})"
            )
        else:
            print()
        thinking = [c for c in rows if any(c.answer_reasoning_tokens)]
        for c in thinking:
            print(f"  {c.label}: {statistics.mean(c.answer_reasoning_tokens):.0f} reasoning tokens before each answer")
    sys.stdout.flush()


class SharedCacheStub(PrefixCacheStub):
    """The cache without DeepSeek's per-user isolation: every user's requests in the account's one namespace."""

    def _usage(self, reply: Any, answer: Any, recorded: RecordedRequest) -> Any:
        shared = recorded.model_copy(update={"body": {k: v for k, v in recorded.fields.items() if k != "user_id"}})
        return super()._usage(reply, answer, shared)


@contextlib.contextmanager
def tools_only_where_callable() -> Any:
    """The other prompt layout: tools sent only with the calls that may call them."""
    from agent_runtime.engine.conversation.summarizer import ModelSummarizer
    from agent_runtime.engine.runs.gateway.gateway import RunGateway

    gateway_request, summary_request = RunGateway.request, ModelSummarizer._request

    def request(self: RunGateway, call: Any) -> Any:
        built = gateway_request(self, call)
        if built.tool_choice == "none":
            built = built.model_copy(update={"tools": None, "tool_choice": None})
        return built

    def summary(self: ModelSummarizer, conversation: Any) -> Any:
        return summary_request(self, conversation).model_copy(update={"tools": None, "tool_choice": None})

    RunGateway.request, ModelSummarizer._request = request, summary  # type: ignore[method-assign]
    try:
        yield
    finally:
        RunGateway.request, ModelSummarizer._request = gateway_request, summary_request  # type: ignore[method-assign]


def thinking_config(tasks: list[str]) -> Path:
    """A copy of config/crewai with thinking on for `tasks`."""
    import shutil

    import yaml

    from agent_runtime.resources import default_config_dir

    config = Path(tempfile.mkdtemp(prefix="agent-runtime-bench-thinking-")) / "crewai"
    shutil.copytree(default_config_dir() / "crewai", config)
    tasks_file = config / "tasks.yaml"
    loaded = yaml.safe_load(tasks_file.read_text(encoding="utf-8"))
    for name in tasks:
        loaded[name]["thinking"] = "enabled"
    tasks_file.write_text(yaml.safe_dump(loaded, allow_unicode=True), encoding="utf-8")
    return config


@dataclass
class Configuration:
    label: str
    settings: dict[str, Any]
    layout: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    stub: type[PrefixCacheStub] = PrefixCacheStub


async def measure(
    dsn: str, configuration: Configuration, runs: list[tuple[int, bool, str]], users: int = 1
) -> list[Conversation]:
    from agent_runtime.engine.runtime import open_engine
    from agent_runtime.settings import Settings

    results: list[Conversation] = []
    async with configuration.stub(api_key=API_KEY, responder=respond) as stub:
        settings = Settings(
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
            **configuration.settings,
        )
        resources = await open_engine(settings, clock=lambda: PEAK)
        try:
            engine = resources.engine
            await engine.runs.ensure_warm()
            with configuration.layout():
                for turns, tools, lang in runs:
                    t0 = time.perf_counter()
                    if users == 1:
                        results.append(await conversation(engine, stub, configuration.label, turns, tools, lang))
                    else:
                        results.append(await first_turns(engine, stub, configuration.label, users, lang))
                    print(
                        f"{configuration.label}: {turns} turns, tools={tools}, {lang}: "
                        f"{time.perf_counter() - t0:.0f} s",
                        file=sys.stderr,
                    )
        finally:
            await resources.close()
    return results


async def first_turns(engine: RuntimeEngine, stub: PrefixCacheStub, label: str, users: int, lang: str) -> Conversation:
    """The first turn of `users` new users, one after the other, in one account."""
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.sessions.models import SessionCreate

    stub.requests.clear()
    stub.accounts.clear()
    result = Conversation(label, 1, False, lang)
    for _ in range(users):
        ctx = RequestContext(user_id=uuid.uuid4())
        session = await engine.sessions.create(ctx, SessionCreate(title="bench"))
        await run_turn(engine, ctx, session.id, user_text(lang, 0, False))
        usage = await engine.usage.for_session(ctx, session.id)
        result.prompt_tokens += usage.total.input_tokens
        result.hit_tokens += usage.total.cached_tokens
        result.cost += usage.total.cost
        result.off_peak += await off_peak_cost(engine, ctx, session.id)
        result.model_calls += usage.total.model_calls
    result.largest_prompt = max(a.prompt_tokens for a in stub.accounts)
    return result


async def bench(dsn: str, args: argparse.Namespace) -> None:
    runs = [(turns, tools, lang) for turns in args.turns for tools in args.tools for lang in args.langs]
    results: list[Conversation] = []
    for name in args.policies:
        results += await measure(dsn, Configuration(name, POLICIES[name]), runs)
    order = {name: i for i, name in enumerate(POLICIES)}
    report("memory policy", sorted(results, key=lambda c: (c.turns, c.tools, c.lang, order[c.label])))
    shipped = Configuration("shipped", {})
    if "layout" in args.extras:
        layout_runs = [(turns, True, lang) for turns in args.turns for lang in args.langs]
        other = Configuration("tools only where callable", {}, layout=tools_only_where_callable)
        compared = await measure(dsn, shipped, layout_runs) + await measure(dsn, other, layout_runs)
        report("prompt layout", sorted(compared, key=lambda c: (c.turns, c.lang)), baseline="shipped")
    if "users" in args.extras:
        isolated = await measure(dsn, Configuration("per-user cache (user_id)", {}), [(1, False, "en")], args.users)
        shared = Configuration("one cache for all users", {}, stub=SharedCacheStub)
        report(
            f"first turn of {args.users} new users",
            isolated + await measure(dsn, shared, [(1, False, "en")], args.users),
            baseline="per-user cache (user_id)",
        )
    if "thinking" in args.extras:
        thinking_runs = [(30, True, lang) for lang in args.langs]
        variants = [
            Configuration("thinking off (shipped)", {}),
            Configuration("thinking in execution", {"crewai_config_dir": thinking_config(["execution"])}),
            Configuration(
                "thinking everywhere",
                {"crewai_config_dir": thinking_config(["intent", "execution", "organization", "memory_summary"])},
            ),
        ]
        measured: list[Conversation] = []
        for variant in variants:
            measured += await measure(dsn, variant, thinking_runs)
        report(f"thinking ({REASONING_WORDS}-word reasoning)", measured, baseline="thinking off (shipped)")


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
    global REASONING_WORDS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"admin URL of the server to create the database on ({LOCAL_SERVER})")
    parser.add_argument("--turns", type=_list(int), default=[10, 30, 100], help="conversation lengths (10,30,100)")
    parser.add_argument("--langs", type=_list(str, ["en", "zh"]), default=["en"], help="languages (en; or en,zh)")
    parser.add_argument("--tools", type=_list(str, ["no", "yes"]), default=["no", "yes"], help="tool turns (no,yes)")
    parser.add_argument(
        "--policies",
        type=lambda t: _list(str, list(POLICIES))(t.replace(";", ",")),
        default=list(POLICIES),
        help="comma-separated, from: " + ", ".join(POLICIES),
    )
    parser.add_argument(
        "--extras", type=_list(str, ["layout", "users", "thinking"]), default=["layout", "users", "thinking"]
    )
    parser.add_argument("--users", type=int, default=10, help="new users whose first turns `users` prices (10)")
    parser.add_argument("--reasoning-words", type=int, default=REASONING_WORDS, help="words per scripted reasoning")
    args = parser.parse_args()
    args.tools = [t == "yes" for t in args.tools]
    REASONING_WORDS = args.reasoning_words
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
