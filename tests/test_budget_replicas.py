"""Budgets hold under concurrency across processes: N runs of one user at once (N = 4, 40, 400), spread over two
real `serve` processes on one database, against a daily budget with room for two runs' holds. Exactly two are
admitted, every other one is refused with 402 `budget_exceeded` (none with a 5xx, none admitted late), and what
the user spent afterwards is within the budget: before reservations, N runs at the edge each spent the rest.

Prices are flat here (a price file of the test's own, no fallback chain), so one run's hold is the same number
in the servers and in the test whatever the hour.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.conftest import User
from tests.runs.conftest import STUB_API_KEY, intent_direct, parse_sse, usage
from tests.stubs.deepseek_stub import DeepSeekStub
from tests.support.serve import ServeProcess, start_serve

from agent_runtime.engine.runs.ledger.reservation import RunReservation
from agent_runtime.engine.runtime import load_config
from agent_runtime.settings import Settings

PROJECT_CONFIG = Path(__file__).resolve().parents[1] / "config"
FLAT = {"input_cache_hit": "0.1", "input_cache_miss": "1", "output": "2"}
PROMPT, COMPLETION = 1_000, 100
RUN_COST = (PROMPT * Decimal(FLAT["input_cache_miss"]) + COMPLETION * Decimal(FLAT["output"])) / 1_000_000


@dataclass
class Replicas:
    a: ServeProcess
    b: ServeProcess
    stub: DeepSeekStub
    hold: Decimal
    budget: Decimal


def flat_price_files(workdir: Path) -> dict[str, str]:
    pricing = yaml.safe_load((PROJECT_CONFIG / "pricing.yaml").read_text())
    pricing["models"]["deepseek/deepseek-flash"]["prices"] = [
        {
            "effective_from": "2026-01-01T00:00:00Z",
            "standard": FLAT,
            "source": "https://api-docs.deepseek.com/zh-cn/quick_start/pricing",
            "read_on": "2026-12-03",
        }
    ]
    models = yaml.safe_load((PROJECT_CONFIG / "models.yaml").read_text())
    models["fallbacks"] = {}
    (workdir / "pricing.yaml").write_text(yaml.safe_dump(pricing))
    (workdir / "models.yaml").write_text(yaml.safe_dump(models))
    return {"PRICING_FILE": str(workdir / "pricing.yaml"), "MODELS_FILE": str(workdir / "models.yaml")}


@pytest.fixture(scope="module")
async def replicas(
    database_url: str, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replicas]:
    workdir = tmp_path_factory.mktemp("budget-replicas")
    files = flat_price_files(workdir)
    served = Settings(
        _env_file=None,  # type: ignore[call-arg]
        deepseek_api_key=STUB_API_KEY,  # type: ignore[arg-type]
        llm_model="deepseek/deepseek-flash",
        pricing_file=Path(files["PRICING_FILE"]),
        models_file=Path(files["MODELS_FILE"]),
    )
    hold = RunReservation(served, load_config(served)).chunk()
    budget = hold * Decimal("2.5")
    async with DeepSeekStub(
        api_key=STUB_API_KEY, responder=lambda request: intent_direct("spent", usage=usage(PROMPT, COMPLETION))
    ) as stub:
        env = {
            **files,
            "LLM_MODEL": "deepseek/deepseek-flash",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "USER_DAILY_BUDGET_CNY": str(budget),
            "MAX_CONCURRENT_RUNS_PER_USER": "0",
            "MAX_RUNS_PER_USER_PER_MINUTE": "0",
            # Every request of the burst reaches the database, where the budget is decided.
            "MAX_CONCURRENT_RUNS": "256",
        }
        a, b = await asyncio.gather(
            start_serve("a", database_url=database_url, workdir=workdir, env=env),
            start_serve("b", database_url=database_url, workdir=workdir, env=env),
        )
        try:
            yield Replicas(a=a, b=b, stub=stub, hold=hold, budget=budget)
        finally:
            for server in (a, b):
                await server.close()


async def _session(client: httpx.AsyncClient, base_url: str, user: User) -> str:
    response = await client.post(f"{base_url}/v1/sessions", headers=user.headers, json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize("runs", [4, 40, 400])
async def test_n_runs_at_the_edge_of_the_budget_over_two_processes_admit_only_what_the_budget_holds(
    replicas: Replicas, settings: Settings, runs: int
) -> None:
    user = User(settings)
    servers = [replicas.a if i % 2 == 0 else replicas.b for i in range(runs)]
    async with httpx.AsyncClient(timeout=60) as setup:
        sessions = await asyncio.gather(*(_session(setup, server.base_url, user) for server in servers))
    # New connections for the burst: one the server closed as idle (HTTP_KEEP_ALIVE_SECONDS) would be a ReadError.
    limits = httpx.Limits(max_connections=runs)
    async with (
        httpx.AsyncClient(base_url=replicas.a.base_url, timeout=60, limits=limits) as a,
        httpx.AsyncClient(base_url=replicas.b.base_url, timeout=60, limits=limits) as b,
    ):
        clients = [a if server is replicas.a else b for server in servers]
        replicas.stub.requests.clear()
        hold = replicas.stub.hold_replies()  # the admitted runs hold their reservations until every answer is in

        async def run(client: httpx.AsyncClient, session_id: str) -> httpx.Response:
            return await client.post(f"/v1/sessions/{session_id}/runs", headers=user.headers, json={"message": "go"})

        tasks = [asyncio.create_task(run(c, s)) for c, s in zip(clients, sessions, strict=True)]
        refusals_in = asyncio.Event()
        for task in tasks:
            task.add_done_callback(lambda _: refusals_in.set() if sum(t.done() for t in tasks) >= runs - 2 else None)
        try:
            async with asyncio.timeout(60):
                await refusals_in.wait()
                held = (await a.get("/v1/usage", headers=user.headers)).json()["budgets"][0]
        finally:
            await hold.release()
        responses = await asyncio.gather(*tasks)

        statuses: dict[Any, int] = {}
        for response in responses:
            key = response.status_code if response.status_code != 402 else response.json()["error"]["code"]
            statuses[key] = statuses.get(key, 0) + 1
        assert statuses == {200: 2, "budget_exceeded": runs - 2}, statuses
        assert all(parse_sse(r.text)[-1]["type"] == "RUN_FINISHED" for r in responses if r.status_code == 200)
        assert Decimal(held["reserved"]) == 2 * replicas.hold
        assert Decimal(held["spent"]) == 0

        after = (await b.get("/v1/usage", headers=user.headers)).json()["budgets"][0]
        assert (Decimal(after["spent"]), Decimal(after["reserved"])) == (2 * RUN_COST, 0)
        assert Decimal(after["spent"]) <= replicas.budget
