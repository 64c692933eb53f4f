"""Quotas follow the lease, with a real kill -9: two `serve` processes on one database, a user at
MAX_CONCURRENT_RUNS_PER_USER with a run on replica A, and A killed. The user's next run on replica B is
refused while the dead run's lease is alive and admitted as soon as it has expired, although no sweep has
recorded the dead run yet (B sweeps once an hour here: only the lease can free the slot)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest
from tests.conftest import User
from tests.runs.conftest import STUB_API_KEY, intent_direct, parse_sse, stage_request_text
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply
from tests.support.serve import ServeProcess, start_serve

LEASE_SECONDS = 6.0
HANG = "[hang]"


def respond(request: RecordedRequest) -> StubReply:
    text = stage_request_text(request)
    if text.startswith(HANG):
        return intent_direct("never sent", delay_seconds=120)
    return intent_direct(f"echo: {text}")


@dataclass
class Replicas:
    a: ServeProcess
    b: ServeProcess
    stub: DeepSeekStub


@pytest.fixture
async def replicas(own_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replicas]:
    workdir = tmp_path_factory.mktemp("quota-after-kill")
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=respond) as stub:
        env = {
            "LLM_MODEL": "deepseek/deepseek-flash",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "RUN_HEARTBEAT_SECONDS": "1",
            "RUN_SWEEP_SECONDS": "3600",  # each sweeps once, at start-up (before the test's runs)
            "MAX_CONCURRENT_RUNS_PER_USER": "1",
            "MAX_RUNS_PER_USER_PER_MINUTE": "0",  # no limit: the test polls
        }
        a, b = await asyncio.gather(
            start_serve("a", database_url=own_database_url, workdir=workdir, env=env),
            start_serve("b", database_url=own_database_url, workdir=workdir, env=env),
        )
        try:
            yield Replicas(a=a, b=b, stub=stub)
        finally:
            for server in (a, b):
                await server.close()


async def post_run(server: ServeProcess, user: User, session_id: str, text: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=180) as client:
        return await client.post(f"/v1/sessions/{session_id}/runs", headers=user.headers, json={"message": text})


async def new_session(server: ServeProcess, user: User) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        response = await client.post("/v1/sessions", headers=user.headers, json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def test_a_killed_replicas_run_frees_its_users_slot_when_its_lease_expires(
    replicas: Replicas, make_user: Callable[[], User]
) -> None:
    user = make_user()
    # Warm-ups: a replica's first run waits for its CrewAI import, which can starve a short lease's renewals.
    for server in (replicas.a, replicas.b):
        warm = await post_run(server, user, await new_session(server, user), "warm-up")
        assert parse_sse(warm.text)[-1]["type"] == "RUN_FINISHED", warm.text
    dead_sid, new_sid = await new_session(replicas.a, user), await new_session(replicas.b, user)
    seen = len(replicas.stub.requests)
    on_a = asyncio.create_task(post_run(replicas.a, user, dead_sid, f"{HANG} a question"))
    async with asyncio.timeout(60):
        await replicas.stub.wait_for_requests(seen + 1)

    replicas.a.kill()
    killed_at = time.monotonic()
    await replicas.a.proc.wait()
    with pytest.raises(httpx.TransportError):
        await on_a

    refused = await post_run(replicas.b, user, new_sid, "too soon")
    assert refused.status_code == 429, refused.text  # the lease is alive: the dead run still counts
    assert refused.json()["error"]["code"] == "too_many_runs"
    while True:
        response = await post_run(replicas.b, user, new_sid, "now")
        if response.status_code != 429:
            break
        assert json.loads(response.text)["error"]["code"] == "too_many_runs"
        assert time.monotonic() - killed_at < LEASE_SECONDS + 3.0, "the slot outlived the lease"
        await asyncio.sleep(0.2)
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED", response.text
    async with httpx.AsyncClient(base_url=replicas.b.base_url, timeout=10) as client:
        dead = (await client.get(f"/v1/sessions/{dead_sid}", headers=user.headers)).json()
    assert dead["status"] == "running"  # not swept yet: the lease alone freed the slot
