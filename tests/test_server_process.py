"""Starts the real `agent-runtime serve` process against the test database and talks HTTP to it."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from uuid import uuid4

import httpx
from tests.conftest import TEST_JWT_SECRET

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
            for _ in range(150):
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
        output = (await asyncio.wait_for(proc.communicate(), 20))[0].decode()
    assert proc.returncode in (0, -signal.SIGTERM), output[-2000:]
    assert "OFFLINE DEMO MODEL" in output
    assert '"msg": "request"' in output and '"path": "/v1/sessions"' in output


async def test_serve_refuses_a_broken_template_with_one_line_naming_file_and_key(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "crewai"
    shutil.copytree(default_config_dir() / "crewai", config)
    tasks = config / "tasks.yaml"
    tasks.write_text(tasks.read_text().replace("{user_input}", "{user_inptu}", 1))
    env = {**os.environ, "DATABASE_URL": database_url, "JWT_SECRET": TEST_JWT_SECRET, "CREWAI_CONFIG_DIR": str(config)}
    proc = await _serve(env, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 1
    assert stdout == b""  # stopped before the banner: nothing claims the service is up
    expected = f"invalid configuration: {tasks}: intent.description: unknown placeholder {{user_inptu}}\n"
    assert stderr.decode() == expected
