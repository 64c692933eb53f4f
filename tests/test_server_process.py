"""Starts the real `agent-runtime serve` process against the test database and talks HTTP to it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from uuid import uuid4

import httpx
from tests.conftest import TEST_JWT_SECRET
from tests.support.processes import bounded

from agent_runtime.resources import default_config_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(env: dict[str, str], *, stderr: int) -> asyncio.subprocess.Process:
    """`agent-runtime serve` in a child process, stdout piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_runtime.cli", "serve", env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr
    )


async def test_serve_process_end_to_end(database_url: str) -> None:
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": TEST_JWT_SECRET, "PORT": str(port)}
    env.pop("DEEPSEEK_API_KEY", None)
    proc = await _serve(env, stderr=asyncio.subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            # Up to 120 s: readiness waits for the CrewAI/LiteLLM warm-up (tens of seconds on a busy machine).
            for _ in range(1200):
                try:
                    if (await client.get("/health/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("server did not become ready")
            token_proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent_runtime.cli",
                "token",
                "--user",
                str(uuid4()),
                env=env,
                stdout=asyncio.subprocess.PIPE,
            )
            token = (await token_proc.communicate())[0].decode().strip()
            headers = {"Authorization": f"Bearer {token}"}
            created = await client.post("/v1/sessions", json={"title": "over http"}, headers=headers)
            assert created.status_code == 201
            listed = (await client.get("/v1/sessions", headers=headers)).json()
            assert [s["title"] for s in listed["items"]] == ["over http"]
            assert (await client.get("/v1/sessions")).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        # A bound, not a wait: exit also waits for the background CrewAI import (seconds on a busy machine).
        output = (await bounded(proc, proc.communicate(), 60))[0].decode()
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    # A handled SIGTERM stops accepting, drains the runs, runs the lifespan shutdown (pool closed) and exits 0
    # (api/server.py; an unhandled kill is -15). The log shows it happened in that order: uvicorn writes the
    # third line only once our lifespan shutdown returned.
    assert proc.returncode == 0, output[-2000:]
    assert [r["msg"] for r in records if r["logger"] == "uvicorn.error"][-4:] == [
        "Shutting down",
        "Waiting for application shutdown.",
        "Application shutdown complete.",
        f"Finished server process [{proc.pid}]",
    ], output[-2000:]
    assert "OFFLINE DEMO MODEL" in output
    assert [(r["method"], r["path"], r["status"]) for r in records if r["msg"] == "request"][-3:] == [
        ("POST", "/v1/sessions", 201),
        ("GET", "/v1/sessions", 200),
        ("GET", "/v1/sessions", 401),
    ]


async def test_serve_refuses_a_broken_template_with_one_line_naming_file_and_key(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "crewai"
    shutil.copytree(default_config_dir() / "crewai", config)
    tasks = config / "tasks.yaml"
    text = tasks.read_text()
    tasks.write_text(text.replace("Carry out the execution_brief of your intent answer above.", "{user_inptu}", 1))
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": TEST_JWT_SECRET, "CREWAI_CONFIG_DIR": str(config)}
    proc = await _serve(env, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await bounded(proc, proc.communicate(), 60)
    assert proc.returncode == 1
    assert stdout == b""  # stopped before the banner: nothing claims the service is up
    expected = f"invalid configuration: {tasks}: execution.request: unknown placeholder {{user_inptu}}\n"
    assert stderr.decode() == expected
