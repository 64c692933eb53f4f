"""A 429 storm through the whole service (HTTP, runs, the flow, LiteLLM) against the DeepSeek stub, for
tests/runs/test_runs_rate_limit_storm.py and scripts/bench/overload.py.

The stub takes `limit` requests at a time per model (DeepSeek limits requests in flight per account and model,
quick_start/rate_limit) and answers 429 without Retry-After beyond; every answer takes `answer_seconds`. Waves of
runs start at once, each run a new user's first turn (one model call: a direct answer). What comes back: how many
runs finished, which model answered each call (the stored replies' model) and what the calls cost.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import httpx
from pydantic import BaseModel, SecretStr
from tests.conftest import User
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply

from agent_runtime.api.app import create_app
from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata
from agent_runtime.settings import Settings

API_KEY = "sk-storm"
FLASH, PRO = "deepseek/deepseek-flash", "deepseek/deepseek-v4-pro"


class RunOutcome(BaseModel):
    finished: bool
    seconds: float


class StormResult(BaseModel):
    runs: int
    finished: int
    answered_by: dict[str, int]
    cost_by: dict[str, Decimal]
    requests: int
    seconds: float
    slowest_run_seconds: float

    @property
    def fallback_share(self) -> float:
        return self.answered_by.get(PRO, 0) / max(1, sum(self.answered_by.values()))

    @property
    def cost(self) -> Decimal:
        return sum(self.cost_by.values(), Decimal(0))

    def line(self, label: str) -> str:
        return (
            f"| {label} | {self.finished}/{self.runs} | {self.answered_by.get(PRO, 0)} ({self.fallback_share:.0%}) "
            f"| {self.cost:.4f} | {self.cost_by.get(PRO, Decimal(0)) / max(self.cost, Decimal('1E-10')):.0%} "
            f"| {self.requests - sum(self.answered_by.values())} | {self.seconds:.1f} s "
            f"| {self.slowest_run_seconds:.1f} s |"
        )


HEADER = (
    "| storm | runs finished | answered by the fallback | CNY | of it, the fallback's | 429s | wall | slowest run |\n"
    "|---|---|---|---|---|---|---|---|"
)


def _answer(request: RecordedRequest) -> StubReply:
    payload = '{"route": "DIRECT_EXECUTION", "assistant_text": "here", "intent_summary": "chat", "safety_flags": []}'
    return StubReply(content=payload)


async def storm(
    settings: Settings,
    waves: Sequence[int],
    *,
    limit: int = 2,
    answer_seconds: float = 0.2,
    **overrides: Any,
) -> StormResult:
    """`waves` of runs started at once, one wave after the other; `overrides` are settings (the wait budget, the
    retry delays)."""

    def slow(request: RecordedRequest) -> StubReply:
        return _answer(request).model_copy(update={"delay_seconds": answer_seconds})

    limits = {"deepseek-flash": limit, "deepseek-v4-pro": limit}
    async with DeepSeekStub(api_key=API_KEY, responder=slow, concurrency_limits=limits) as stub:
        values: dict[str, Any] = {
            "environment": "test",
            "llm_model": FLASH,
            "llm_api_base": stub.base_url,
            "deepseek_api_key": SecretStr(API_KEY),
            "openai_api_key": None,
            "llm_timeout_seconds": 10.0,
            "run_timeout_seconds": 240.0,
            "db_pool_max_size": 20,
            "max_concurrent_runs": 64,
            **overrides,
        }
        app_settings = settings.model_copy(update=values)
        app = create_app(app_settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=300) as client:
                warm = User(app_settings)
                await _run(
                    client, warm, await _session(client, warm)
                )  # CrewAI and LiteLLM load on a process's first run
                stub.requests.clear()
                users = [User(app_settings) for _ in range(sum(waves))]
                sessions = [await _session(client, user) for user in users]
                started = time.perf_counter()
                outcomes: list[RunOutcome] = []
                at = 0
                for size in waves:
                    batch = range(at, at + size)
                    outcomes += await asyncio.gather(*(_run(client, users[i], sessions[i]) for i in batch))
                    at += size
                seconds = time.perf_counter() - started
                answered: Counter[str] = Counter()
                cost: dict[str, Decimal] = {}
                for user, sid in zip(users, sessions, strict=True):
                    response = await client.get(f"/v1/sessions/{sid}/messages", headers=user.headers)
                    for message in response.json()["items"]:
                        if message["role"] != "assistant":
                            continue
                        model = AssistantOutputMetadata.model_validate(message["metadata"]).model or "?"
                        answered[model] += 1
                        cost[model] = cost.get(model, Decimal(0)) + Decimal(message["cost"])
    return StormResult(
        runs=len(outcomes),
        finished=sum(outcome.finished for outcome in outcomes),
        answered_by=dict(answered),
        cost_by=cost,
        requests=len(stub.requests),
        seconds=seconds,
        slowest_run_seconds=max(outcome.seconds for outcome in outcomes),
    )


async def _session(client: httpx.AsyncClient, user: User) -> str:
    created = await client.post("/v1/sessions", headers=user.headers, json={})
    return str(created.json()["id"])


async def _run(client: httpx.AsyncClient, user: User, sid: str) -> RunOutcome:
    started = time.perf_counter()
    response = await client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hello"})
    return RunOutcome(finished='"type":"RUN_FINISHED"' in response.text, seconds=time.perf_counter() - started)
