"""A 429 storm: DeepSeek limits requests in flight per account and model (quick_start/rate_limit) and answers 429
beyond, without Retry-After. Against a stub taking 2 at a time per model, with 10 runs at once (twice), then 5 and 10
times its limit, every run finishes: a busy model is waited for (LLM_OVERLOAD_WAIT_SECONDS, small delays here) before
its fallback chain, and each answer is priced by the model that gave it. The test prints what share of the calls the
fallback answered and what they cost (docs/benchmarks.md, "Overload"). A cancel stops a run that waits at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from tests.conftest import User
from tests.runs.conftest import MakeHarness, RunResult, warm_up
from tests.support.overload_storm import HEADER, storm

from agent_runtime.settings import Settings

# Small delays, so the storm takes seconds: the waits start at 25-50 ms and grow to 0.2-0.4 s.
PATIENT = {"llm_retry_base_seconds": 0.05, "llm_retry_max_seconds": 0.4, "llm_overload_wait_seconds": 30.0}


@pytest.mark.parametrize(("label", "waves"), [("10 at once, twice", [10, 10]), ("5x", [10]), ("10x", [20])])
async def test_past_the_concurrency_limit_every_run_finishes(
    settings: Settings, label: str, waves: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    result = await storm(settings, waves, **PATIENT)

    assert result.finished == result.runs == sum(waves)
    assert sum(result.answered_by.values()) == result.runs
    assert result.requests > result.runs  # the stub refused some: the storm happened
    with capsys.disabled():
        print(f"\n{HEADER}\n{result.line(label)}")


async def test_a_cancel_stops_a_run_that_waits_for_a_busy_model(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(**PATIENT) as h:
        await warm_up(h, make_user())
        h.stub.concurrency_limits = {"deepseek-flash": 0, "deepseek-v4-pro": 0}  # every request: 429
        user = make_user()
        sid = await h.new_session(user)
        seen = len(h.stub.requests)
        run = asyncio.create_task(h.run(user, sid, "hello"))
        async with asyncio.timeout(10):
            await h.stub.wait_for_requests(seen + 3)  # waiting, with 30 s of budget left
        (listed,) = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
        cancelled_at = time.perf_counter()
        cancel = await h.client.post(f"/v1/sessions/{sid}/runs/{listed['id']}/cancel", headers=user.headers)
        assert cancel.status_code == 202
        async with asyncio.timeout(10):
            result: RunResult = await run
        assert time.perf_counter() - cancelled_at < 1.0
        assert result.events[-1]["outcome"] == {"type": "cancelled"}
        runs = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
        assert [r["status"] for r in runs] == ["cancelled"]
