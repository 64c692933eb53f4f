"""A 429 storm: DeepSeek limits requests in flight per account and model (quick_start/rate_limit); past the limit it
answers 429. At three times the stub's limit every run still finishes, by retrying (Retry-After) or by falling back
along config/models.yaml's chain, and each answer is priced by the model that gave it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import httpx
from pydantic import SecretStr
from tests.conftest import User
from tests.runs.conftest import PEAK_TIME, STUB_API_KEY, RunResult, default_responder, parse_sse, types
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply

from agent_runtime.api.app import create_app
from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata
from agent_runtime.settings import Settings

LIMIT = 2
RUNS = 3 * LIMIT
# Peak prices, CNY per million cache-miss prompt and output tokens (config/pricing.yaml).
PRICES = {"deepseek/deepseek-flash": (Decimal(2), Decimal(8)), "deepseek/deepseek-v4-pro": (Decimal(9), Decimal(27))}


def slow(request: RecordedRequest) -> StubReply:
    """Every answer takes a second: the calls of one wave are in flight together."""
    return default_responder(request).model_copy(update={"delay_seconds": 1.0})


@asynccontextmanager
async def storm_app(settings: Settings) -> Any:
    limits = {"deepseek-flash": LIMIT, "deepseek-v4-pro": LIMIT}
    async with DeepSeekStub(
        api_key=STUB_API_KEY, responder=slow, concurrency_limits=limits, concurrency_retry_after="2"
    ) as stub:
        values: dict[str, Any] = {
            "environment": "test",
            "llm_model": "deepseek/deepseek-flash",
            "llm_api_base": stub.base_url,
            "deepseek_api_key": SecretStr(STUB_API_KEY),
            "openai_api_key": None,
            "llm_timeout_seconds": 10.0,
            # One retry, after the 429's Retry-After (2 s, when the first wave has answered), then the fallback.
            "llm_max_retries": 1,
            "llm_retry_base_seconds": 0.01,
            "llm_retry_max_seconds": 2.0,
            "run_timeout_seconds": 120.0,
            "db_pool_max_size": 10,
        }
        app = create_app(settings.model_copy(update=values), clock=lambda: PEAK_TIME)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
                yield stub, client


async def test_at_three_times_the_concurrency_limit_every_run_finishes_priced_by_its_model(
    settings: Settings, make_user: Callable[[], User]
) -> None:
    async with storm_app(settings) as (stub, client):
        users = [make_user() for _ in range(RUNS)]
        sessions = []
        for user in users:
            created = await client.post("/v1/sessions", headers=user.headers, json={})
            sessions.append(created.json()["id"])
        # CrewAI and LiteLLM load on the first run of the process: one run first, on its own.
        warm = await client.post(f"/v1/sessions/{sessions[0]}/runs", headers=users[0].headers, json={"message": "hi"})
        assert warm.status_code == 200
        stub.requests.clear()

        async def run(user: User, sid: str) -> RunResult:
            response = await client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hello"})
            return RunResult(response.status_code, response.headers, response.text, parse_sse(response.text))

        results = await asyncio.gather(*(run(u, s) for u, s in zip(users, sessions, strict=True)))

        assert [types(r.events)[-1] for r in results] == ["RUN_FINISHED"] * RUNS, [r.body[-300:] for r in results]
        served = [r.body["model"] for r in stub.requests]
        # The first wave: LIMIT answered, the rest refused; their retry: LIMIT more answered; the last LIMIT
        # went to the fallback, which answered.
        assert sorted(served) == sorted(["deepseek-flash"] * (RUNS + RUNS - LIMIT) + ["deepseek-v4-pro"] * LIMIT)
        answered_by: list[str] = []
        for user, sid in zip(users, sessions, strict=True):
            response = await client.get(f"/v1/sessions/{sid}/messages", headers=user.headers)
            (reply,) = [
                m for m in response.json()["items"] if m["role"] == "assistant" and m["content"].endswith("hello")
            ]
            metadata = AssistantOutputMetadata.model_validate(reply["metadata"])
            assert metadata.model is not None and metadata.price_tier == "peak"
            miss, output = PRICES[metadata.model]
            expected = (reply["input_tokens"] * miss + reply["output_tokens"] * output) / 1_000_000
            assert Decimal(reply["cost"]) == expected.quantize(Decimal("1E-10"))
            answered_by.append(metadata.model)
        assert sorted(answered_by) == sorted(
            ["deepseek/deepseek-flash"] * (RUNS - LIMIT) + ["deepseek/deepseek-v4-pro"] * LIMIT
        )
