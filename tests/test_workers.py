"""WORKERS=2: one `serve` parent, two worker processes on its port (api/workers.py), a real stub model.

One process tree serves the whole module, in file order: runs go through the shared port, a worker killed
with SIGKILL is replaced (and its metrics listener comes back), SIGTERM drains every worker (the stream in
flight ends with RUN_ERROR `run_interrupted`, exit 0, no process left), and a worker whose parent was killed
exits on its own.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from tests.conftest import User
from tests.runs.conftest import STUB_API_KEY, intent_direct, parse_sse, stage_request_text
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply
from tests.support.serve import ServeProcess, alive, free_ports, poll_until, start_serve, worker_pids

from agent_runtime.api.workers import Supervisor, _Worker
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.settings import Settings

HANG = "[hang]"


def respond(request: RecordedRequest) -> StubReply:
    text = stage_request_text(request).split("\n\n")[-1]
    if text.startswith(HANG):
        return intent_direct("never sent", delay_seconds=120)
    return intent_direct(f"echo: {text}")


@dataclass
class Workers:
    server: ServeProcess
    stub: DeepSeekStub
    metrics_port: int
    workdir: Path


async def metrics_answer(port: int) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"http://127.0.0.1:{port}/metrics")).status_code == 200
    except httpx.TransportError:
        return False


async def run_text(server: ServeProcess, user: User, text: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=180) as client:
        created = await client.post("/v1/sessions", headers=user.headers, json={})
        assert created.status_code == 201, created.text
        response = await client.post(
            f"/v1/sessions/{created.json()['id']}/runs", headers=user.headers, json={"message": text}
        )
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


@pytest.fixture(scope="module")
async def workers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Workers]:
    workdir = tmp_path_factory.mktemp("workers")
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=respond) as stub:
        # Chosen once the stub holds its port: a port released by the probe can be the next one handed out.
        metrics_port = free_ports(2)
        env = {
            "WORKERS": "2",
            "METRICS_PORT": str(metrics_port),
            "LLM_MODEL": "deepseek/deepseek-flash",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "SHUTDOWN_GRACE_SECONDS": "1",
            "TOOLS_FILE": str(workdir / "tools.yaml"),
            "TOOL_IDENTITY_SECRET": "workers-tool-identity-secret-0123456789",
        }
        server = await start_serve("workers", database_url=database_url, workdir=workdir, env=env)
        try:
            # The port answers once one worker is up; each worker's own metrics listener says it is up too.
            for index in range(2):
                await poll_until(lambda i=index: metrics_answer(metrics_port + i), bool, within=120)
            yield Workers(server, stub, metrics_port, workdir)
        finally:
            await server.close()


async def test_two_workers_serve_the_port_each_with_its_own_metrics_listener(workers: Workers, user: User) -> None:
    assert len(worker_pids(workers.server.proc.pid)) == 2
    events = await asyncio.gather(*(run_text(workers.server, user, f"question {i}") for i in range(4)))
    assert [e[-1]["type"] for e in events] == ["RUN_FINISHED"] * 4
    lines = [json.loads(line) for line in workers.server.log_path.read_text().splitlines() if line.startswith("{")]
    assert {line["worker"] for line in lines if line["logger"] == "uvicorn.error"} == {0, 1}


def _log_lines(server: ServeProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]


async def test_sighup_to_the_parent_reloads_the_tools_file_in_every_worker(workers: Workers, user: User) -> None:
    tool = {"name": "friends_events", "description": "Events.", "method": "GET", "url": "http://127.0.0.1:9/events"}
    (workers.workdir / "tools.yaml").write_text(json.dumps({"http": [tool]}), encoding="utf-8")
    os.kill(workers.server.proc.pid, signal.SIGHUP)

    async def reloaded() -> list[dict[str, Any]]:
        await asyncio.sleep(0.1)
        return [line for line in _log_lines(workers.server) if line["msg"] == "tools reloaded"]

    lines = await poll_until(reloaded, lambda found: len(found) == 2, within=30)
    assert sorted((line["worker"], line["tools"], line["added"], line["removed"]) for line in lines) == [
        (0, ["friends_events"], ["friends_events"], []),
        (1, ["friends_events"], ["friends_events"], []),
    ]
    assert len(worker_pids(workers.server.proc.pid)) == 2, "a hang-up ends no process"
    async with httpx.AsyncClient(base_url=workers.server.base_url, timeout=30) as client:
        for _ in range(4):
            capabilities = (await client.get("/v1/agui/capabilities", headers=user.headers)).json()
            assert capabilities["tools"]["items"][-1]["name"] == "friends_events"


async def test_a_killed_worker_is_replaced(workers: Workers, user: User) -> None:
    victim = worker_pids(workers.server.proc.pid)[1]
    os.kill(victim, signal.SIGKILL)
    pids = await poll_until(
        lambda: asyncio.sleep(0, worker_pids(workers.server.proc.pid)),
        lambda found: len(found) == 2 and victim not in found,
        within=30,
    )
    assert all(alive(pid) for pid in pids)
    await poll_until(lambda: metrics_answer(workers.metrics_port + 1), bool, within=60)
    events = await run_text(workers.server, user, "after the crash")
    assert events[-1]["type"] == "RUN_FINISHED"
    exited = [json.loads(line) for line in workers.server.log_path.read_text().splitlines() if "worker exited" in line]
    assert [(line["worker"], line["exitcode"]) for line in exited] == [(1, -signal.SIGKILL)]


async def test_sigterm_drains_every_worker_and_the_stream_in_flight_ends_with_run_interrupted(
    workers: Workers, user: User, engine: RuntimeEngine
) -> None:
    pids = worker_pids(workers.server.proc.pid)
    seen = len(workers.stub.requests)
    stream = asyncio.create_task(run_text(workers.server, user, f"{HANG} until the deploy"))
    async with asyncio.timeout(120):
        await workers.stub.wait_for_requests(seen + 1)

    status = await workers.server.stop()
    events = await stream

    assert status == 0, workers.server.log_tail()
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "run_interrupted", events[-1]
    run_started = next(e for e in events if e["type"] == "RUN_STARTED")
    session = await engine.sessions.get(user.ctx, UUID(str(run_started["threadId"])))
    assert session.status == "failed"
    assert not any(alive(pid) for pid in pids)
    assert "Traceback" not in workers.server.log_tail(50_000)


async def test_workers_whose_parent_was_killed_exit_on_their_own(database_url: str, tmp_path: Path) -> None:
    server = await start_serve("orphans", database_url=database_url, workdir=tmp_path, env={"WORKERS": "2"})
    try:
        pids = worker_pids(server.proc.pid)
        assert len(pids) == 2
        server.kill()
        await server.proc.wait()
        await poll_until(
            lambda: asyncio.sleep(0, [pid for pid in pids if alive(pid)]), lambda left: not left, within=15
        )
    finally:
        # When they do not exit (the bug this test catches), they would serve on after the session: ~690 MB
        # and the port.
        await server.close()


def _killed_during_start_up() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, in the middle of the warm-up


def _start_up_failed() -> None:
    sys.exit(3)  # uvicorn's status when the lifespan's start-up raised (e.g. the warm-up's import failed)


def test_a_worker_killed_during_its_start_up_is_replaced_one_whose_start_up_failed_stops_the_service(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither ever reports started: the first is killed, its replacement exits with an error.
    context = multiprocessing.get_context("spawn")
    targets = [_killed_during_start_up, _start_up_failed]
    spawned: list[int] = []

    def spawn(self: Supervisor, index: int) -> _Worker:
        process = context.Process(target=targets[len(spawned)])
        process.start()
        spawned.append(index)
        return _Worker(index, process, context.Event())

    monkeypatch.setattr(Supervisor, "_spawn", spawn)
    with socket.socket() as sock:
        status = Supervisor(settings.model_copy(update={"workers": 1}), sock, shutdown_seconds=5).run()
    assert (status, spawned) == (1, [0, 0])
