"""What the load benchmarks read from the processes they measure: CPU and RSS from /proc, the PostgreSQL backends
of a server (by application_name), and our server's own telemetry (/metrics, the access log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import asyncpg
from load_kit import ADMIN_URL, Server, Target

CLK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants alive now (a server with workers is a parent and its children)."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    todo.extend(int(child) for child in fh.read().split())
    return tree


def _tree_sum(pid: int, measure: Callable[[int], float]) -> float:
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):  # ended meanwhile
            total += measure(member)
    return total


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its descendants, plus the workers that ended (cutime + cstime of `pid`)."""
    fields = _stat_fields(pid)
    return _tree_sum(pid, proc_cpu) + (int(fields[13]) + int(fields[14])) / CLK


def tree_rss_mb(pid: int) -> float:
    return _tree_sum(pid, proc_rss_mb)


async def db_backend_cpu(server: Server) -> float:
    """CPU seconds of the PostgreSQL backends serving `server` (its application_name), those alive now."""
    if not server.app_name:
        return 0.0
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        pids = [
            r["pid"]
            for r in await conn.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = $1", server.app_name)
        ]
    finally:
        await conn.close()
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # ended meanwhile
            total += proc_cpu(pid)
    return total


@dataclass
class CpuUse:
    """CPU seconds over a phase: the server, its PostgreSQL backends, this load generator, the stub."""

    server: float
    db: float
    client: float
    stub: float


@dataclass
class CpuMeter:
    server: Server
    stub: Server | None = None
    _start: CpuUse | None = None

    async def _read(self) -> CpuUse:
        stub = proc_cpu(self.stub.pid) if self.stub else 0.0
        return CpuUse(tree_cpu(self.server.pid), await db_backend_cpu(self.server), time.process_time(), stub)

    async def start(self) -> None:
        self._start = await self._read()

    async def stop(self) -> CpuUse:
        end, start = await self._read(), self._start
        assert start is not None
        return CpuUse(end.server - start.server, end.db - start.db, end.client - start.client, end.stub - start.stub)


async def metrics_lines(server: Server) -> list[str]:
    """Every line of the server's /metrics, of all its workers (each worker counts its own)."""
    lines: list[str] = []
    async with aiohttp.ClientSession() as http:
        for url in server.metrics_urls:
            async with http.get(url) as r:
                lines.extend((await r.text()).splitlines())
    return lines


async def watch_pool(target: Target, peak: list[int]) -> None:
    """Keeps in `peak[0]` the most acquires our database pool had queued at one reading of its gauge (our
    sampler sets it every 0.5 s); runs until cancelled."""
    if target.peer:
        return
    while True:
        waiting = [
            int(float(line.split()[1]))
            for line in await metrics_lines(target.server)
            if line.startswith("agent_runtime_db_pool_waiting_requests ")
        ]
        peak[0] = max(peak[0], sum(waiting))
        await asyncio.sleep(0.5)


def refusal_durations(server: Server, first: int) -> list[float]:
    """Our access log's `duration_ms` of the server's `first` 429s: from the request entering the app to its
    response (without the time a request waited to be accepted and parsed)."""
    durations = []
    for line in server.log_path.read_text().splitlines():
        if '"status": 429' in line:
            durations.append(float(json.loads(line)["duration_ms"]))
    return durations[:first]


async def statement_counts(server: Server) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in await metrics_lines(server):
        if line.startswith("bench_sql_statements_total{"):
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            counts[kind] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def ticker_lags(server: Server, since: float, until: float) -> list[float]:
    """The lag probe's samples (seconds late) of every process of `server` between two wall-clock times."""
    if server.lag_file is None:
        return []
    samples: list[float] = []
    for path in server.lag_file.parent.glob(f"{server.lag_file.name}.*"):
        for line in path.read_text(encoding="ascii").splitlines():
            at, late = line.split()
            if since <= float(at) <= until:
                samples.append(float(late))
    return samples
