"""Real `agent-runtime serve` processes for tests: started against the test database, stopped or killed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
from tests.conftest import TEST_JWT_SECRET
from tests.support.processes import MARKER_ENV, end_marked, marker_for

T = TypeVar("T")

# Env vars that would point a server at a real model (or away from what the test chose).
PROVIDER_ENV = ("LLM_MODEL", "LLM_API_BASE", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "LLM_MAX_RETRIES")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports that are free now (METRICS_PORT + i for each worker)."""
    while True:
        base = free_port()
        probes: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
        return base


@dataclass
class ServeProcess:
    name: str
    base_url: str
    proc: asyncio.subprocess.Process
    log_path: Path
    workdir: Path
    # In the environment of the server and of every process it starts (tests/support/processes.py).
    marker: str

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def stop(self, within: float = 30) -> int:
        """SIGTERM, then wait; returns the exit status (SIGKILL and AssertionError if it does not exit)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), within)
            except TimeoutError:
                self.kill()
                await self.proc.wait()
                raise AssertionError(f"{self.name} did not stop within {within} s:\n{self.log_tail()}") from None
        assert self.proc.returncode is not None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL this process only: what it started is left to itself (as after a crash)."""
        if self.proc.returncode is None:
            self.proc.kill()

    async def close(self) -> None:
        """End the server and everything it started, however they are left (orphaned workers, a PostgreSQL
        a kill -9 left behind): for a `finally`, after whatever stop the test itself checks."""
        self.kill()
        await self.proc.wait()
        await end_marked(self.marker)


async def start_serve(
    name: str,
    *,
    database_url: str | None,
    workdir: Path,
    env: dict[str, str] | None = None,
    ready_timeout: float = 120,
    command: list[str] | None = None,
) -> ServeProcess:
    """`agent-runtime serve` on a free port, ready (GET /health/ready is 200: its CrewAI and LiteLLM imports are
    done, which take seconds on a busy machine); output in `workdir/server-<name>.log`.

    `database_url=None` starts the embedded PostgreSQL (under DATA_DIR); `command` replaces
    `python -m agent_runtime.cli` (e.g. an installed `agent-runtime` script)."""
    server = await launch_serve(name, database_url=database_url, workdir=workdir, env=env, command=command)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_timeout
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=2) as client:
            while loop.time() < deadline:
                if server.proc.returncode is not None:
                    raise AssertionError(f"server {name} exited with {server.proc.returncode}:\n{server.log_tail()}")
                with contextlib.suppress(httpx.TransportError):
                    ready = await client.get("/health/ready")
                    if ready.status_code == 200:
                        return server
                await asyncio.sleep(0.1)
        raise AssertionError(f"server {name} did not become ready in {ready_timeout} s:\n{server.log_tail()}")
    except BaseException:
        # Also when it exited: what it had started may still run (an embedded PostgreSQL, a worker).
        await server.close()
        raise


async def launch_serve(
    name: str,
    *,
    database_url: str | None,
    workdir: Path,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> ServeProcess:
    """`start_serve` without the wait: the process has just been started."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if k not in (*PROVIDER_ENV, "DATABASE_URL")}
    if database_url is not None:
        full_env["DATABASE_URL"] = database_url
    full_env.update(
        JWT_SECRET=TEST_JWT_SECRET,
        PORT=str(port),
        DATA_DIR=str(workdir / f"data-{name}"),
        ENVIRONMENT="test",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        # Servers of many tests share one database and each would take over the others' dead runs (as the suite's
        # in-process engines, tests/conftest.py): the tests of takeovers turn them on, on databases of their own.
        RUN_MAX_TAKEOVERS="0",
    )
    full_env.update(env or {})
    marker = full_env[MARKER_ENV] = marker_for(name)
    log_path = workdir / f"server-{name}.log"
    with log_path.open("wb") as log:
        # cwd outside the checkout: no developer `.env` can change what the test chose.
        proc = await asyncio.create_subprocess_exec(
            *(command or [sys.executable, "-m", "agent_runtime.cli"]),
            "serve",
            env=full_env,
            cwd=workdir,
            stdout=log,
            stderr=log,
        )
    return ServeProcess(name, f"http://127.0.0.1:{port}", proc, log_path, workdir, marker)


async def poll_until(fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], *, within: float) -> T:
    """`fetch()` until `done(value)`, every 0.1 s, for at most `within` seconds (AssertionError after that).

    For state another process changes (a replica's sweep): there is no event in this process to wait for.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    for _ in itertools.count():
        value = await fetch()
        if done(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not done within {within} s: {value!r}")
        await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


def worker_pids(parent: int) -> list[int]:
    """The parent's children that are workers (spawned; multiprocessing's resource tracker is a child too)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return sorted(int(pid) for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes())


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False
