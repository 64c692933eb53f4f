"""A run lost with its process is charged what it had sent, not its hold (issue 32), with a real kill -9: two
`serve` processes on one database, a run on replica A whose first three model calls were answered (the intent, a
tool call, the execution) and whose fourth (the answer) streamed part of its text and went silent, and A killed.
Replica B's sweep fails the run and charges it the estimate A's last lease renewal stored: what the answered
calls were billed, the cut call's prompt and the output it streamed. Against the stub's own bill: at most 1.5x
what it billed and streamed, plus the prompt of the call it never answered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import pytest
from tests.conftest import User
from tests.runs.conftest import STUB_API_KEY, execution_done, intent_direct, intent_needs, organized, parse_sse
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply, StubToolCall
from tests.support.bill import stub_bill
from tests.support.serve import ServeProcess, start_serve

LEASE_SECONDS = 6.0
MODEL = "deepseek-flash"


@dataclass
class Replicas:
    a: ServeProcess
    b: ServeProcess
    stub: DeepSeekStub


@pytest.fixture
async def replicas(own_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replicas]:
    workdir = tmp_path_factory.mktemp("lost-run-charge")
    responder: Callable[[RecordedRequest], StubReply] = lambda request: intent_direct("warm")  # noqa: E731
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=responder) as stub:
        env = {
            "LLM_MODEL": f"deepseek/{MODEL}",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "RUN_HEARTBEAT_SECONDS": "1",
            "MAX_RUNS_PER_USER_PER_MINUTE": "0",
            "RUN_MAX_TAKEOVERS": "0",  # the lost run's charge: the path past the last takeover
        }
        a, b = await asyncio.gather(
            start_serve("a", database_url=own_database_url, workdir=workdir, env={**env, "RUN_SWEEP_SECONDS": "3600"}),
            start_serve("b", database_url=own_database_url, workdir=workdir, env={**env, "RUN_SWEEP_SECONDS": "1"}),
        )
        try:
            yield Replicas(a=a, b=b, stub=stub)
        finally:
            for server in (a, b):
                await server.close()


async def _post(server: ServeProcess, user: User, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=180) as client:
        return await client.post(path, headers=user.headers, json=body)


async def _budget(server: ServeProcess, user: User) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        budgets: list[dict[str, Any]] = (await client.get("/v1/usage", headers=user.headers)).json()["budgets"]
    return budgets[0]


async def test_a_run_lost_with_its_process_is_charged_what_it_had_sent(
    replicas: Replicas, make_user: Callable[[], User]
) -> None:
    user = make_user()
    for server in (replicas.a, replicas.b):  # warm-ups: a replica's first run waits for its imports
        sid = (await _post(server, user, "/v1/sessions", {})).json()["id"]
        warm = await _post(server, user, f"/v1/sessions/{sid}/runs", {"message": "warm-up"})
        assert parse_sse(warm.text)[-1]["type"] == "RUN_FINISHED", warm.text
    before = await _budget(replicas.b, user)
    sid = (await _post(replicas.a, user, "/v1/sessions", {})).json()["id"]
    seen = len(replicas.stub.requests)
    calculator = StubToolCall(id="call_1", name="calculator", arguments=json.dumps({"expression": "17 + 25"}))
    answer = "It is 42, and here is a long explanation of why that is so. " * 40
    replicas.stub.enqueue(
        intent_needs("Compute 17 + 25."),
        StubReply(tool_calls=[calculator]),
        execution_done("17 + 25 = 42", {"result": "42"}),
        organized(answer, chunk_chars=40, stall_after_chunks=40, stall_seconds=120),  # silent after 1,600 characters
    )
    on_a = asyncio.create_task(_post(replicas.a, user, f"/v1/sessions/{sid}/runs", {"message": "what is 17 + 25?"}))
    async with asyncio.timeout(60):
        await replicas.stub.wait_for_requests(seen + 4)
    await asyncio.sleep(2.5)  # two lease renewals store the run's estimate
    replicas.a.kill()
    await replicas.a.proc.wait()
    with pytest.raises(httpx.TransportError):
        await on_a

    async with asyncio.timeout(LEASE_SECONDS + 20):
        while True:  # until B's sweep has failed the run and released its hold
            after = await _budget(replicas.b, user)
            if after["reserved"] == before["reserved"]:
                break
            await asyncio.sleep(0.2)
    charged = Decimal(after["spent"]) - Decimal(before["spent"])
    bill = stub_bill(replicas.stub.requests[seen:])
    assert [r.billed is not None for r in replicas.stub.requests[seen:]] == [True, True, True, False]
    assert len(replicas.stub.requests[-1].streamed) >= 1_500
    # At least the bill, the unanswered prompt (counted by the service with DeepSeek's tokenizer, tools included:
    # more than the stub's rough count) and most of the output streamed (the two tokenizers differ); at most 1.5x
    # the bill and that output, plus the prompt.
    least = bill.answered + bill.unanswered + Decimal("0.8") * bill.streamed
    most = Decimal("1.5") * (bill.answered + bill.streamed) + bill.unanswered
    assert least <= charged <= most, (charged, bill)
    async with httpx.AsyncClient(base_url=replicas.b.base_url, timeout=10) as client:
        session = (await client.get(f"/v1/sessions/{sid}", headers=user.headers)).json()
    assert session["status"] == "failed"
