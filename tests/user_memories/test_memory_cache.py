"""Recall keeps DeepSeek's prefix cache hitting: the recalled-memories block is after the cached prefix, and every
earlier turn is repeated with the block it was shown. Measured on the stub that bills DeepSeek's cache prefix units
(tests/stubs/prefix_cache.py): the share of prompt tokens billed as cache hits over a conversation, with and without
recall (numbers printed; docs/benchmarks.md, "Long-term memory recall")."""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import SecretStr
from tests.conftest import User
from tests.runs.conftest import MODEL, PEAK_TIME, STUB_API_KEY, intent_direct, stage_request_text
from tests.stubs.deepseek_stub import RecordedRequest, StubReply
from tests.stubs.prefix_cache import PrefixCacheStub

from agent_runtime.api.app import create_app
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.user_memories.lanes import Lane
from agent_runtime.settings import Settings

FACTS = [
    "The user lives in Paris.",
    "The user is allergic to peanuts.",
    "用户的猫叫咪咪。",
    "The user works as a nurse.",
]
TURNS = [
    "Hello there!",
    "What should I cook tonight?",
    "Any idea for a weekend trip near where I live?",
    "我的猫最近不爱吃饭，怎么办？",
    "Suggest a snack for my night shift.",
    "Thanks, and what about a book to read?",
    "What is a good gift for a colleague?",
    "How do I say thank you in French?",
]


def _is_extraction(request: RecordedRequest) -> bool:
    return any("MemoryExtraction" in str(m.get("content") or "") for m in request.messages if m.get("role") == "system")


def responder(request: RecordedRequest) -> StubReply:
    if _is_extraction(request):
        return StubReply(content=json.dumps({"operations": []}))
    return intent_direct(f"echo: {stage_request_text(request)[:40]}")


async def hit_share(settings: Settings, user: User, *, memories: bool) -> tuple[float, int]:
    """The conversation's cache-hit share of the stages' prompt tokens, and how many turns saw recalled memories."""
    async with PrefixCacheStub(api_key=STUB_API_KEY, responder=responder) as stub:
        values: dict[str, Any] = {
            "environment": "test",
            "llm_model": MODEL,
            "llm_api_base": stub.base_url,
            "deepseek_api_key": SecretStr(STUB_API_KEY),
            "openai_api_key": None,
            "run_timeout_seconds": 120.0,
            "user_memories_enabled": memories,
        }
        app = create_app(settings.model_copy(update=values), clock=lambda: PEAK_TIME)
        async with app.router.lifespan_context(app):
            engine = app.state.engine
            store = engine.memories.store
            vectors = await store.embedder.embed(FACTS, "passage", lane=Lane.EXTRACTION)
            ctx = RequestContext(user_id=user.id)
            for text, vector in zip(FACTS, vectors.vectors, strict=True):
                await store.add(ctx, text, sources=[], session_id=None, vector=vector, generation=0)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
                sid = (await client.post("/v1/sessions", headers=user.headers)).json()["id"]
                for text in TURNS:
                    response = await client.post(
                        f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": text}
                    )
                    assert response.status_code == 200 and "RUN_FINISHED" in response.text
                    await engine.runs.wait_idle()
                    await engine.memories.wait_idle()
        stages = [a for r, a in zip(stub.requests, stub.accounts, strict=True) if not _is_extraction(r)]
        recalled = sum("RECALLED_MEMORIES_JSON" in json.dumps(r.messages[-1:]) for r in stub.requests)
        return sum(a.hit_tokens for a in stages) / sum(a.prompt_tokens for a in stages), recalled


async def test_recall_keeps_the_prefix_cache_hitting(settings: Settings, make_user: Any) -> None:
    without, _ = await hit_share(settings, make_user(), memories=False)
    with_recall, recalled = await hit_share(settings, make_user(), memories=True)
    print(
        f"\ncache-hit share of prompt tokens over {len(TURNS)} turns: {without:.3f} without recall, "
        f"{with_recall:.3f} with recall ({recalled} requests carried recalled memories)"
    )
    assert recalled >= len(TURNS)
    # The block adds uncached tokens once per turn (its own); everything before it still hits.
    assert with_recall >= without - 0.05
