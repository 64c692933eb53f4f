"""Patience under overload (issue 31): DeepSeek answers 429 past its requests in flight per account and model
(quick_start/rate_limit), usually without Retry-After. A call waits for its model with growing, jittered delays (or
the Retry-After it got) for up to LLM_OVERLOAD_WAIT_SECONDS, then walks its fallback chain, which waits as long; it
fails only when both waits are spent, and a cancel cuts a wait at once."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from pydantic import ValidationError
from tests.llm.conftest import stub_settings
from tests.stubs.deepseek_stub import DeepSeekStub, StubFault, StubReply

from agent_runtime.engine.llm import LLMClient, LLMRequest, WireMessage
from agent_runtime.engine.llm.catalog import FallbackTarget, ModelCatalog, ModelsFile
from agent_runtime.engine.llm.errors import LLMRateLimitError, LLMUnavailableError
from agent_runtime.engine.llm.retry import OverloadWait, RetryPolicy
from agent_runtime.settings import Settings

HELLO = LLMRequest(
    messages=[WireMessage(role="user", content="hello")], model="deepseek/deepseek-flash", thinking=False
)
CHAIN = ModelCatalog(
    ModelsFile(fallbacks={"deepseek/deepseek-flash": [FallbackTarget(model="deepseek/deepseek-v4-pro")]})
)
BUSY = StubFault(kind="status", status=429, message="Rate Limit Reached")


def client(stub: DeepSeekStub, budget: float) -> LLMClient:
    settings = stub_settings(
        stub, llm_overload_wait_seconds=budget, llm_retry_base_seconds=0.01, llm_retry_max_seconds=0.1
    )
    return LLMClient(settings, catalog=CHAIN)


def test_the_waits_grow_jittered_up_to_the_cap_and_end_with_the_budget() -> None:
    policy = RetryPolicy(max_retries=2, base_seconds=0.5, max_seconds=8.0, overload_seconds=20.0)
    wait = OverloadWait(policy)
    rng = random.Random(7)
    delays = []
    now = 0.0
    while (delay := wait.next_delay(LLMRateLimitError(), rng, now)) is not None:
        delays.append(delay)
        now += delay
    ceilings = [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert len(delays) == len(ceilings)
    for delay, ceiling in zip(delays[:-1], ceilings, strict=False):
        assert ceiling / 2 <= delay <= ceiling
    # The last wait is cut to what is left of the budget: the call is tried once more at its end.
    assert sum(delays) == pytest.approx(20.0)
    # Retry-After is honoured, cut to what is left too.
    told = OverloadWait(policy)
    assert told.next_delay(LLMRateLimitError(retry_after=3.0), rng, 0.0) == 3.0
    assert told.next_delay(LLMRateLimitError(retry_after=30.0), rng, 3.0) == 17.0


async def test_a_busy_model_is_waited_for_and_answers_itself(stub: DeepSeekStub) -> None:
    stub.enqueue(*[BUSY] * 6, StubReply(content="at last"))
    response = await client(stub, budget=10.0).complete(HELLO)
    assert (response.model, response.content, response.fallback_from) == ("deepseek/deepseek-flash", "at last", None)
    assert [r.body["model"] for r in stub.requests] == ["deepseek-flash"] * 7


async def test_the_chain_waits_as_long_and_the_call_fails_only_when_both_waits_are_spent() -> None:
    async with DeepSeekStub(concurrency_limits={"deepseek-flash": 0, "deepseek-v4-pro": 0}) as stub:
        start = time.perf_counter()
        with pytest.raises(LLMUnavailableError) as caught:
            await client(stub, budget=0.4).complete(HELLO)
        elapsed = time.perf_counter() - start
    assert 0.8 <= elapsed < 3.0
    models = [r.body["model"] for r in stub.requests]
    first_pro = models.index("deepseek-v4-pro")
    # Several tries of each, the model's first and then its chain's; nothing else in between.
    assert first_pro >= 3 and len(models) - first_pro >= 3
    assert set(models[:first_pro]) == {"deepseek-flash"} and set(models[first_pro:]) == {"deepseek-v4-pro"}
    assert caught.value.provider_message.startswith(
        "deepseek/deepseek-flash: llm_rate_limited; fallbacks (deepseek/deepseek-v4-pro): llm_rate_limited"
    )


async def test_a_cancel_cuts_the_wait_for_a_busy_model() -> None:
    async with DeepSeekStub(concurrency_limits={"deepseek-flash": 0, "deepseek-v4-pro": 0}) as stub:
        call = asyncio.create_task(client(stub, budget=30.0).complete(HELLO))
        async with asyncio.timeout(5):
            await stub.wait_for_requests(3)
        start = time.perf_counter()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert time.perf_counter() - start < 0.2


def test_the_wait_must_stay_well_inside_the_run_timeout() -> None:
    with pytest.raises(ValidationError, match="LLM_OVERLOAD_WAIT_SECONDS must be at most a quarter"):
        Settings(_env_file=None, llm_overload_wait_seconds=80, run_timeout_seconds=300)  # type: ignore[call-arg]
    assert Settings(_env_file=None, llm_overload_wait_seconds=75).llm_overload_wait_seconds == 75  # type: ignore[call-arg]
