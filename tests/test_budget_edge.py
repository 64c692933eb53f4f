"""A run is admitted only if it can finish, at a budget's edge, over two real `serve` processes on one database:
users with a small daily budget run until they are refused (one run at a time, 4 at once, 40 at once), a third
of the runs with three model calls (intent, execution, organization) and the rest with one. At most 5 % of the
admitted runs end `budget_exceeded`, the first 402 comes only once less than two typical runs' cost is left
(budget less spent less held, as the 402 says), and what each user spent is within the budget.

Before admission was sized from the user's runs (engine/runs/ledger/reservation.py), every run was admitted
holding a whole memory window's worst case and its hold grew by at least that much again: the 402 came with
about four runs' cost left, and the runs admitted near the edge ended `budget_exceeded` midway.

Prices are flat (tests/test_budget_replicas.py), and the stub bills each call's prompt as counted locally, so the
estimate the holds are built on is the bill's.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
import pytest
from tests.conftest import User
from tests.runs.conftest import (
    STUB_API_KEY,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    parse_sse,
    stage_of,
    stage_request_text,
    usage,
)
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply
from tests.support.serve import ServeProcess, start_serve
from tests.test_budget_replicas import flat_price_files

from agent_runtime.engine.conversation.tokens import token_counter_for
from agent_runtime.settings import Settings

MODEL = "deepseek/deepseek-flash"
BUDGET = Decimal("0.12")
LEFT = re.compile(r"has ([0-9.]+) CNY left")


@dataclass
class Servers:
    a: ServeProcess
    b: ServeProcess


@dataclass
class Edge:
    admitted: int = 0
    exceeded: int = 0
    left_at_first_402: Decimal | None = None
    spent: Decimal = Decimal(0)
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def typical(self) -> Decimal:
        return self.spent / self.admitted


def prompt_tokens(request: RecordedRequest) -> int:
    counter = token_counter_for(MODEL)
    wire: list[dict[str, Any]] = list(request.messages)
    tools = request.fields.get("tools")
    if tools:
        wire.append({"role": "system", "content": json.dumps(tools)})
    return sum(counter.count_wire(m) for m in wire)


def respond(request: RecordedRequest) -> StubReply:
    billed = prompt_tokens(request)
    stage = stage_of(request)
    if stage == "execution":
        return execution_done("done", {"result": "42"}, usage=usage(billed, 80))
    if stage == "organization":
        return organized("It is 42.", usage=usage(billed, 120))
    if "needs" in stage_request_text(request):
        return intent_needs("Compute 6*7.", usage=usage(billed, 40))
    return intent_direct("hello", usage=usage(billed, 60))


@pytest.fixture(scope="module")
async def servers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Servers]:
    workdir = tmp_path_factory.mktemp("budget-edge")
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=respond) as stub:
        env = {
            **flat_price_files(workdir),
            "LLM_MODEL": MODEL,
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "USER_DAILY_BUDGET_CNY": str(BUDGET),
            "MAX_CONCURRENT_RUNS_PER_USER": "0",
            "MAX_RUNS_PER_USER_PER_MINUTE": "0",
            "MAX_SESSIONS_PER_USER": "0",
            "MAX_CONCURRENT_RUNS": "256",
            "MEMORY_EXTRACTION_ENABLED": "false",
        }
        a, b = await asyncio.gather(
            start_serve("a", database_url=database_url, workdir=workdir, env=env),
            start_serve("b", database_url=database_url, workdir=workdir, env=env),
        )
        try:
            yield Servers(a=a, b=b)
        finally:
            for server in (a, b):
                await server.close()


async def _wave(clients: list[httpx.AsyncClient], user: User, first: int, size: int, edge: Edge) -> int:
    """`size` runs at once, alternating between the servers; how many were admitted."""
    picked = [clients[(first + i) % 2] for i in range(size)]
    created = await asyncio.gather(*(c.post("/v1/sessions", headers=user.headers, json={}) for c in picked))
    sessions = [r.json()["id"] for r in created]
    messages = ["go needs" if (first + i) % 3 == 0 else "go" for i in range(size)]
    responses = await asyncio.gather(
        *(
            c.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": m})
            for c, sid, m in zip(picked, sessions, messages, strict=True)
        )
    )
    admitted = 0
    # The first wave with a 402: the most any of its 402s says was left.
    lefts = [LEFT.search(r.json()["error"]["message"]) for r in responses if r.status_code == 402]
    if lefts and edge.left_at_first_402 is None:
        edge.left_at_first_402 = max(Decimal(m.group(1)) for m in lefts if m is not None)
    for response in responses:
        if response.status_code == 402:
            assert response.json()["error"]["code"] == "budget_exceeded", response.text
            key = "402"
        else:
            assert response.status_code == 200, response.text
            admitted += 1
            last = parse_sse(response.text)[-1]
            key = last["type"] if last["type"] == "RUN_FINISHED" else f"{last['type']} {last.get('code')}"
            assert key in ("RUN_FINISHED", "RUN_ERROR budget_exceeded"), last
            edge.exceeded += key == "RUN_ERROR budget_exceeded"
        edge.statuses[key] = edge.statuses.get(key, 0) + 1
    edge.admitted += admitted
    return admitted


@pytest.mark.parametrize("at_once", [1, 4, 40])
async def test_at_a_budgets_edge_runs_are_admitted_only_if_they_can_finish(
    servers: Servers, settings: Settings, at_once: int
) -> None:
    user = User(settings)
    edge = Edge()
    async with (
        httpx.AsyncClient(base_url=servers.a.base_url, timeout=60) as a,
        httpx.AsyncClient(base_url=servers.b.base_url, timeout=60) as b,
    ):
        # The user has a history: three runs, one with three model calls, two with one.
        for first in range(3):
            assert await _wave([a, b], user, first, 1, edge) == 1
        first = 3
        async with asyncio.timeout(60):
            while await _wave([a, b], user, first, at_once, edge):
                first += at_once
        usage_now = (await a.get("/v1/usage", headers=user.headers)).json()["budgets"][0]
    edge.spent = Decimal(usage_now["spent"])
    print(
        f"at once {at_once}: admitted {edge.admitted}, budget_exceeded {edge.exceeded}, typical {edge.typical:.6f}, "
        f"left at first 402 {edge.left_at_first_402}, spent {edge.spent} of {BUDGET}, {edge.statuses}"
    )
    assert edge.exceeded <= edge.admitted * Decimal("0.05"), edge
    assert edge.left_at_first_402 is not None and edge.left_at_first_402 < 2 * edge.typical, edge
    assert Decimal(usage_now["reserved"]) == 0, usage_now
    assert edge.spent <= BUDGET, usage_now
