"""A real `agent-runtime serve` process for tests: spawn, wait until ready, stop."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import httpx


def errors_in(output: str) -> str:
    """The ERROR lines of a serve process's JSON log, each with the end of its traceback."""
    found = []
    for line in output.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("level") == "ERROR":
            found.append(f"{record.get('msg')}\n{str(record.get('exc', ''))[-2000:]}")
    return "\n".join(found) or output[-2000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def spawn_serve(
    env: dict[str, str], *, cwd: Path, command: list[str] | None = None
) -> asyncio.subprocess.Process:
    """`serve` with stdout and stderr together on one pipe (read it after the process ends)."""
    return await asyncio.create_subprocess_exec(
        *(command or [sys.executable, "-m", "agent_runtime.cli"]),
        "serve",
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def wait_ready(proc: asyncio.subprocess.Process, port: int) -> None:
    """Poll /health/ready until it answers 200 (within 120 s); fail with the process's errors if it exits first."""
    async with asyncio.timeout(120), httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        while True:
            if proc.returncode is not None:
                output = (await proc.communicate())[0].decode()
                raise AssertionError(f"serve exited with {proc.returncode}:\n{errors_in(output)}")
            try:
                if (await client.get("/health/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
