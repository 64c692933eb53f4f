"""Long-term memory recall (issue 24): scripted multi-session conversations in English and Chinese on the demo model
(deterministic extraction) against real PostgreSQL + pgvector, then questions that need the facts.

    uv run python scripts/bench/memory_recall.py [--database-url URL] [--big 10000] [--distractors 40]

Prints: recall@5 of the target fact, stale facts (updated or deleted) in the top 5, the demo answer quoting the
fact, recall latency p50/p99 at --big memories for one user (SQL alone and with the query's embedding), and
the CNY memories add per turn (extraction calls and recall blocks, DeepSeek tokenizer, deepseek-flash peak prices).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402
from tests.runs.conftest import parse_sse, text_messages  # noqa: E402
from tests.support.database import LOCAL_SERVER, PgServer, create_database, drop_database, find_server  # noqa: E402

# (plant session, update session, deleted-fact session, questions: (question, target, stale texts)).
EN: dict[str, Any] = {
    "plant": "Hi! My name is {name}. I live in {city}. I work as a {job}. I am allergic to {allergen}.",
    "plant2": "My favourite food is {food}. My dog is called {pet}.",
    "update": "I moved to {city2}.",
    "questions": [
        ("Where do I live these days?", "The user lives in {city2}.", ["The user lives in {city}."]),
        ("What do I do for a living?", "The user works as a {job}.", []),
        ("Is there anything I should not eat because of an allergy?", "The user is allergic to {allergen}.", []),
        ("What should I cook for dinner that I would enjoy?", "The user's favourite food is {food}.", []),
        ("Do you remember what I am called?", "The user's name is {name}.", []),
        ("What is my dog's name?", None, ["The user's dog is called {pet}."]),
    ],
}
ZH: dict[str, Any] = {
    "plant": "你好！我叫{name}，我住在{city}。我是一名{job}。我对{allergen}过敏。",
    "plant2": "我最喜欢的食物是{food}。我的狗叫{pet}。",
    "update": "我搬到了{city2}。",
    "questions": [
        ("我现在住在哪个城市？", "用户住在{city2}。", ["用户住在{city}。"]),
        ("我是做什么工作的？", "用户是一名{job}。", []),
        ("我有什么东西不能吃？", "用户对{allergen}过敏。", []),
        ("晚饭做点什么我会喜欢？", "用户最喜欢的食物是{food}。", []),
        ("你还记得我的名字吗？", "用户叫{name}。", []),
        ("我的狗叫什么？", None, ["用户的狗叫{pet}。"]),
    ],
}
EN_PEOPLE = [
    dict(name="Alice", city="Berlin", city2="Paris", job="nurse", allergen="peanuts", food="sushi", pet="Rex"),
    dict(name="Bob", city="Boston", city2="Denver", job="pilot", allergen="shellfish", food="pizza", pet="Max"),
    dict(name="Carla", city="Madrid", city2="Lisbon", job="teacher", allergen="gluten", food="paella", pet="Toby"),
    dict(name="Dev", city="Mumbai", city2="Toronto", job="chef", allergen="milk", food="curry", pet="Bruno"),
    dict(name="Emma", city="Sydney", city2="Perth", job="lawyer", allergen="eggs", food="pasta", pet="Luna"),
]
ZH_PEOPLE = [
    dict(name="小明", city="上海", city2="杭州", job="医生", allergen="花生", food="饺子", pet="旺财"),
    dict(name="小红", city="北京", city2="深圳", job="律师", allergen="海鲜", food="火锅", pet="豆豆"),
    dict(name="李雷", city="广州", city2="成都", job="工程师", allergen="牛奶", food="烤鸭", pet="大黄"),
    dict(name="韩梅", city="南京", city2="西安", job="老师", allergen="鸡蛋", food="面条", pet="小白"),
    dict(name="王芳", city="武汉", city2="重庆", job="护士", allergen="芒果", food="包子", pet="花花"),
]
DISTRACTORS_EN = [
    "The user's {r} likes {t}.",
    "The user once visited {p}.",
    "The user wants to learn {t}.",
    "The user's {r} lives in {p}.",
    "The user read a book about {t}.",
    "The user plans a trip to {p}.",
]
DISTRACTORS_ZH = [
    "用户的{r}喜欢{t}。",
    "用户去过{p}。",
    "用户想学{t}。",
    "用户的{r}住在{p}。",
    "用户读过一本关于{t}的书。",
]
WORDS = {
    "r": ["sister", "brother", "colleague", "neighbour", "friend", "cousin", "boss", "mother"],
    "t": ["chess", "jazz", "painting", "tennis", "astronomy", "history", "yoga", "photography", "poetry", "sailing"],
    "p": ["Rome", "Cairo", "Kyoto", "Oslo", "Lima", "Hanoi", "Dublin", "Prague", "Seoul", "Quito"],
}
WORDS_ZH = {
    "r": ["姐姐", "哥哥", "同事", "邻居", "朋友", "表弟", "老板", "妈妈"],
    "t": ["象棋", "爵士乐", "绘画", "网球", "天文", "历史", "瑜伽", "摄影", "诗歌", "帆船"],
    "p": ["罗马", "开罗", "京都", "奥斯陆", "利马", "河内", "都柏林", "布拉格", "首尔", "基多"],
}


# A turn of the 10-turn English conversation without tools (docs/benchmarks.md, "Conversation cost": 0.0223 CNY).
TURN_CNY = Decimal("0.00223")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_turn(client: httpx.AsyncClient, engine: Any, headers: dict[str, str], sid: str, text: str) -> str:
    response = await client.post(f"/v1/sessions/{sid}/runs", headers=headers, json={"message": text})
    await engine.runs.wait_idle()
    await engine.memories.wait_idle()
    return "\n".join(text_messages(parse_sse(response.text)).values())


async def conversations(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    from agent_runtime.api.app import create_app
    from agent_runtime.engine.auth import mint_token
    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.user_memories.block import recall_block
    from agent_runtime.engine.user_memories.lanes import Lane
    from agent_runtime.settings import Settings

    settings = Settings(
        _env_file=None,
        environment="test",
        database_url=dsn,
        llm_model=None,
        deepseek_api_key=None,
        user_memories_enabled=True,
        data_dir=Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-memories-{uuid.uuid4().hex[:8]}",
    )
    app = create_app(settings)
    stats: dict[str, Any] = {"questions": 0, "hit5": 0, "stale": 0, "answered": 0, "deleted_stale": 0, "turns": 0}
    per_lang: dict[str, list[int]] = {"en": [0, 0], "zh": [0, 0]}
    rng = random.Random(7)
    async with app.router.lifespan_context(app):
        engine = app.state.engine
        calls = record_extraction_calls(engine)
        blocks: list[str] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=120) as client:
            for lang, script, people in (("en", EN, EN_PEOPLE), ("zh", ZH, ZH_PEOPLE)):
                for person in people:
                    user_id = uuid.uuid4()
                    ctx = RequestContext(user_id=user_id)
                    headers = {"Authorization": f"Bearer {mint_token(settings, user_id)}"}

                    async def session(headers: dict[str, str] = headers) -> str:
                        created = await client.post("/v1/sessions", headers=headers)
                        return str(created.json()["id"])

                    for key in ("plant", "plant2", "update"):
                        await run_turn(client, engine, headers, await session(), script[key].format(**person))
                        stats["turns"] += 1
                    # Distractors: facts of the same shape about other things, embedded for real.
                    templates, words = (DISTRACTORS_EN, WORDS) if lang == "en" else (DISTRACTORS_ZH, WORDS_ZH)
                    texts = sorted(
                        {
                            rng.choice(templates).format(**{k: rng.choice(v) for k, v in words.items()})
                            for _ in range(args.distractors * 2)
                        }
                    )[: args.distractors]
                    vectors = await engine.memories.store.embedder.embed(texts, "passage", lane=Lane.EXTRACTION)
                    for text, vector in zip(texts, vectors.vectors, strict=True):
                        await engine.memories.store.add(
                            ctx, text, sources=[], session_id=None, vector=vector, generation=0
                        )
                    # Deletion: the user deletes the pet fact through the API.
                    page = (
                        await client.get("/v1/memories", headers=headers, params={"q": "dog 狗", "limit": 1})
                    ).json()
                    pet = next(
                        m for m in page["items"] if "Rex" in m["text"] or "狗" in m["text"] or "dog" in m["text"]
                    )
                    await client.delete(f"/v1/memories/{pet['id']}", headers=headers)
                    for question, target, stale in script["questions"]:
                        recall = await engine.memories.store.recall(ctx, question, k=5, session_id=None, lane=Lane.RUN)
                        top = [h.text for h in recall.hits]
                        reply = await run_turn(client, engine, headers, await session(), question)
                        # What the turn was shown: the hits within the margin of the best one (MemoryService.recall).
                        floor = recall.hits[0].similarity - settings.user_memories_recall_margin if recall.hits else 0
                        blocks.append(recall_block([h.text for h in recall.hits if h.similarity >= floor]))
                        stale_texts = [s.format(**person) for s in stale]
                        if target is None:
                            stats["deleted_stale"] += sum(s in top or s in reply for s in stale_texts)
                            continue
                        goal = target.format(**person)
                        stats["questions"] += 1
                        per_lang[lang][1] += 1
                        if goal in top:
                            stats["hit5"] += 1
                            per_lang[lang][0] += 1
                        stats["stale"] += sum(s in top for s in stale_texts)
                        stats["answered"] += goal in reply
            stats["extraction"] = extraction_cost(calls, blocks, stats["turns"] + len(blocks))
    stats["per_lang"] = per_lang
    return stats


def record_extraction_calls(engine: Any) -> list[tuple[list[str], str]]:
    """Every extraction call's messages and answer (wraps the memory service's client)."""
    calls: list[tuple[list[str], str]] = []
    service = engine.memories
    make_client = service._llm

    class Recording:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def complete(self, request: Any, **kwargs: Any) -> Any:
            response = await self._inner.complete(request, **kwargs)
            calls.append(([m.content or "" for m in request.messages], response.content))
            return response

    service._llm = lambda: Recording(make_client())
    return calls


def extraction_cost(calls: list[tuple[list[str], str]], blocks: list[str], turns: int) -> dict[str, Any]:
    """What memories add per turn at deepseek-flash peak prices, counted with DeepSeek's tokenizer: each
    extraction call (its system message cached, its data and answer not; the demo's answer stands in for a real
    model's, which writes the same operations) and each recall block (new tokens once, in the turn's first call)."""
    from agent_runtime.engine.conversation.chat_messages import AssistantMessage, SystemMessage, UserMessage
    from agent_runtime.engine.conversation.tokens import token_counter_for

    count = token_counter_for("deepseek/deepseek-flash")
    hit, miss, out = Decimal("0.04"), Decimal("2"), Decimal("8")  # CNY per million, deepseek-flash at peak
    system = data = output = 0
    for messages, answer in calls:
        system += count(SystemMessage(content=messages[0]))
        data += count(UserMessage(content=messages[1]))
        output += count(AssistantMessage(content=answer))
    block = sum(count(UserMessage(content=b)) for b in blocks if b)
    extraction = (system * hit + data * miss + output * out) / Decimal(1_000_000)
    recall = block * miss / Decimal(1_000_000)
    n = max(1, len(calls))
    return {
        "calls": len(calls),
        "turns": turns,
        "system": system // n,
        "data": data // n,
        "output": output // n,
        "block": block // max(1, len(blocks)),
        "per_turn": (extraction + recall) / turns,
        "extraction_per_turn": extraction / turns,
        "recall_per_turn": recall / turns,
    }


async def latency(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    from agent_runtime.engine.context import RequestContext
    from agent_runtime.engine.user_memories.embeddings import LocalEmbedder, vector_literal
    from agent_runtime.engine.user_memories.lanes import Lane

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    embedder = LocalEmbedder()
    rng = random.Random(11)
    users = [uuid.uuid4() for _ in range(1 + args.others)]
    counts = [args.big] + [args.big // 5] * args.others
    for user_id, n in zip(users, counts, strict=True):
        for start in range(0, n, 2000):
            size = min(2000, n - start)
            vectors = []
            for _ in range(size):
                v = [rng.gauss(0, 1) for _ in range(384)]
                norm = sum(x * x for x in v) ** 0.5
                vectors.append(vector_literal([x / norm for x in v]))
            await pool.execute(
                "INSERT INTO user_memories (user_id, text, embedding, embedding_model) "
                "SELECT $1, 'The user filler fact ' || i, v::vector, $3 "
                "FROM unnest($2::text[]) WITH ORDINALITY AS t(v, i)",
                user_id,
                vectors,
                embedder.model,
            )
    await pool.execute("ANALYZE user_memories")
    ctx = RequestContext(user_id=users[0])
    questions = [q for script in (EN, ZH) for q, _, _ in script["questions"]]
    sql_ms: list[float] = []
    embed_ms: list[float] = []
    total_ms: list[float] = []
    for i in range(args.samples):
        q = questions[i % len(questions)] + f" {i}"
        t0 = time.perf_counter()
        emb = await embedder.embed([q], "query", lane=Lane.RUN)
        t1 = time.perf_counter()
        from agent_runtime.engine.user_memories.repository import RECALL_SQL

        await pool.fetch(RECALL_SQL, ctx.user_id, vector_literal(emb.vectors[0]), embedder.model, 5, None)
        t2 = time.perf_counter()
        embed_ms.append((t1 - t0) * 1000)
        sql_ms.append((t2 - t1) * 1000)
        total_ms.append((t2 - t0) * 1000)
    plan = await pool.fetch(
        "EXPLAIN " + RECALL_SQL,
        ctx.user_id,
        vector_literal(emb.vectors[0]),
        embedder.model,
        5,
        None,
    )
    index = "hnsw" if any("ix_user_memories_embedding" in r[0] for r in plan) else "btree+sort"
    await pool.close()
    embedder.close()
    return {"sql": sql_ms, "embed": embed_ms, "total": total_ms, "plan": index, "rows": sum(counts)}


async def main_async(args: argparse.Namespace) -> None:
    server = PgServer(admin_url=args.database_url, embedded=None) if args.database_url else await find_server()
    try:
        name = await create_database(server, prefix="agent_runtime_bench")
        try:
            from agent_runtime.db.migrations import apply_migrations

            await apply_migrations(server.url_for(name))
            conv = await conversations(server.url_for(name), args)
            print_conversations(conv, args)
            lat = await latency(server.url_for(name), args)
            print_latency(lat, conv, args)
        finally:
            await drop_database(server, name)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


def print_conversations(conv: dict[str, Any], args: argparse.Namespace) -> None:
    q = conv["questions"]
    print("| measure | result | target |")
    print("|---|---|---|")
    print(
        f"| recall@5 (all, {q} questions, {args.distractors} distractors each user) | {conv['hit5'] / q:.2f} | >= 0.9 |"
    )
    for lang, (hits, n) in conv["per_lang"].items():
        print(f"| recall@5 {lang} | {hits / n:.2f} ({hits}/{n}) | >= 0.9 |")
    print(f"| stale fact in top 5 after an update | {conv['stale']} | 0 |")
    print(f"| deleted fact recalled or in the answer | {conv['deleted_stale']} | 0 |")
    print(f"| demo answer quotes the target fact | {conv['answered']}/{q} | |")


def print_latency(lat: dict[str, Any], conv: dict[str, Any], args: argparse.Namespace) -> None:
    ext = conv["extraction"]
    print(
        f"| recall SQL p50 / p99 at {args.big:,} memories ({lat['rows']:,} rows, plan {lat['plan']}) | "
        f"{pct(lat['sql'], 0.5):.1f} / {pct(lat['sql'], 0.99):.1f} ms | p99 < 20 ms |"
    )
    print(
        f"| query embedding p50 / p99 (local e5-small, 1 thread) | {pct(lat['embed'], 0.5):.1f} / "
        f"{pct(lat['embed'], 0.99):.1f} ms | |"
    )
    print(f"| recall end to end p50 / p99 | {pct(lat['total'], 0.5):.1f} / {pct(lat['total'], 0.99):.1f} ms | |")
    print(f"| extraction calls / turns (no first-person statement: no call) | {ext['calls']} / {ext['turns']} | |")
    print(
        f"| tokens per extraction call: system (cached) / data / output | {ext['system']} / {ext['data']} / "
        f"{ext['output']} | |"
    )
    print(f"| recall block tokens per question turn (new, at the miss price once) | {ext['block']} | |")
    # The target is the extraction's cost; the recall block is reported beside it, not under it.
    extraction_share = ext["extraction_per_turn"] / TURN_CNY * 100
    print(
        f"| extraction CNY per turn | {ext['extraction_per_turn']:.6f} = {extraction_share:.1f} % of a {TURN_CNY} "
        "CNY turn | < 15 % |"
    )
    share = ext["per_turn"] / TURN_CNY * 100
    print(
        f"| added CNY per turn (extraction {ext['extraction_per_turn']:.6f} + recall {ext['recall_per_turn']:.6f}) | "
        f"{ext['per_turn']:.6f} = {share:.1f} % of a {TURN_CNY} CNY turn | |"
    )
    print(f"(mean of {statistics.mean(lat['sql']):.1f} ms SQL over {len(lat['sql'])} samples)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"admin URL of the server to create the database on ({LOCAL_SERVER})")
    parser.add_argument("--big", type=int, default=10_000, help="memories of the latency user")
    parser.add_argument("--others", type=int, default=4, help="other users, each with big/5 memories")
    parser.add_argument("--distractors", type=int, default=40, help="unrelated memories per scripted user")
    parser.add_argument("--samples", type=int, default=300)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
