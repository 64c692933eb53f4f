"""The real `agent-runtime serve` process, for tests that need real sockets (uvicorn, not an ASGI transport)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from uuid import uuid4

import httpx
import jwt
from tests.conftest import TEST_JWT_SECRET

# Model and provider settings a developer's environment may hold: a spawned server runs the offline demo model.
_PROVIDER_ENV = ("LLM_MODEL", "LLM_API_BASE", "DEEPSEEK_API_KEY", "OPENAI_API_KEY")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_env(database_url: str, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROVIDER_ENV}
    return {**env, "DATABASE_URL": database_url, "JWT_SECRET": TEST_JWT_SECRET, **overrides}


async def spawn_serve(env: dict[str, str], *, stderr: int) -> asyncio.subprocess.Process:
    """`agent-runtime serve` in a child process, stdout piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_runtime.cli", "serve", env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr
    )


async def wait_ready(base_url: str, proc: asyncio.subprocess.Process) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=5) as client:
        for _ in range(300):
            if proc.returncode is not None:
                raise AssertionError(f"server exited with {proc.returncode}")
            try:
                if (await client.get("/health/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("server did not become ready")


@dataclass(frozen=True)
class RunningServer:
    base_url: str
    host: str
    port: int
    pid: int


@asynccontextmanager
async def running_server(database_url: str, **env: str) -> AsyncIterator[RunningServer]:
    """A ready server on a free port; stopped with SIGTERM (and its exit checked) on the way out."""
    port = free_port()
    proc = await spawn_serve(serve_env(database_url, PORT=str(port), **env), stderr=asyncio.subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(base_url, proc)
        yield RunningServer(base_url=base_url, host="127.0.0.1", port=port, pid=proc.pid)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
        assert proc.returncode in (0, -signal.SIGTERM), output[-3000:]


def bearer_token() -> str:
    claims = {"sub": str(uuid4()), "exp": int(time.time()) + 3600}
    return jwt.encode(claims, TEST_JWT_SECRET, algorithm="HS256")
