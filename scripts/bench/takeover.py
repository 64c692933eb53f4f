"""Issue 33's benchmark: how long a dead replica's runs wait before another replica goes on with them.

Two `agent-runtime serve` processes, A and B, on one fresh database and one load stub (load_stub.py); every run is
the demo question's full route (intent, a calculator call, execution, organization) at --latency seconds per model
call. --runs runs start on A; once every one has made its first model call, A is killed (SIGKILL) and B takes them
over (engine/runs/takeover/). The database is read every 20 ms: for each run, the time from the kill to its claim
(`agent_runs.takeovers` = 1) and to its end, and how it ended. Bounds: RUN_LEASE_SECONDS + RUN_SWEEP_SECONDS to
the claim (the lease A renewed last, then B's next sweep).

    uv run python scripts/bench/takeover.py [--runs 20] [--latency 2] [--lease 4] [--sweep 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

import asyncpg
from load_kit import (
    Server,
    Target,
    client,
    create_database,
    drop_database,
    loadavg,
    start_ours,
    start_stub,
    stop_on_sigterm,
    text_for,
)

STATE_SQL = "SELECT session_id, takeovers, status, error_code FROM agent_runs WHERE session_id = ANY($1::uuid[])"


@dataclass
class Watched:
    claimed: dict[UUID, float] = field(default_factory=dict)
    ended: dict[UUID, float] = field(default_factory=dict)
    outcomes: dict[UUID, str] = field(default_factory=dict)


async def watch(url: str, sessions: list[UUID], killed_at: float, within: float) -> Watched:
    seen = Watched()
    conn = await asyncpg.connect(url)
    try:
        while len(seen.ended) < len(sessions) and time.monotonic() - killed_at < within:
            now = time.monotonic() - killed_at
            for row in await conn.fetch(STATE_SQL, sessions):
                sid = row["session_id"]
                if row["takeovers"] >= 1:
                    seen.claimed.setdefault(sid, now)
                if row["status"] != "running" and sid not in seen.ended:
                    seen.ended[sid] = now
                    seen.outcomes[sid] = row["error_code"] or row["status"]
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return seen


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} s / {max(values):.2f} s"


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    url = await create_database()
    servers: list[Server] = []
    try:
        stub = await start_stub(workdir)
        servers.append(stub)
        env = {
            "RUN_LEASE_SECONDS": str(args.lease),
            "RUN_HEARTBEAT_SECONDS": str(args.lease / 4),
            "RUN_SWEEP_SECONDS": str(args.sweep),
            "RUN_MAX_TAKEOVERS": "2",
            "MAX_CONCURRENT_RUNS_PER_USER": "0",
        }
        a, b = await asyncio.gather(*(start_ours(n, url, stub, workdir, env) for n in ("a", "b")))
        servers += [a, b]
        target = Target("a", a)
        async with client() as http:
            sessions = await target.ensure_sessions(http, args.runs)
            runs = [asyncio.create_task(target.run(http, s, text_for(args.latency))) for s in sessions]
            # Every run's first call is out (its intent, latency seconds long): then A dies.
            await asyncio.sleep(min(args.latency / 2, 1.0) + 0.5)
            a.popen.kill()
            killed_at = time.monotonic()
            ids = [UUID(s.id) for s in sessions]
            seen = await watch(url, ids, killed_at, within=args.lease + args.sweep + 10 * args.latency + 30)
            await asyncio.gather(*runs, return_exceptions=True)
        outcomes = [seen.outcomes.get(i, "still running") for i in ids]
        print(f"# takeover: {args.runs} runs killed with A at {args.latency} s per model call, lease {args.lease} s, ")
        print(f"# sweep {args.sweep} s; load {loadavg()}")
        print("| runs | kill to claim (p50 / max) | kill to end (p50 / max) | completed | lost | bound to claim |")
        print("|---|---|---|---|---|---|")
        print(
            f"| {args.runs} | {_summary(list(seen.claimed.values()))} | {_summary(list(seen.ended.values()))} "
            f"| {outcomes.count('completed')} | {outcomes.count('run_lost')} | {args.lease + args.sweep:.1f} s |"
        )
    finally:
        for server in reversed(servers):
            server.stop()
        await drop_database(url)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model call")
    parser.add_argument("--lease", type=float, default=4.0, help="RUN_LEASE_SECONDS")
    parser.add_argument("--sweep", type=float, default=0.5, help="RUN_SWEEP_SECONDS")
    asyncio.run(main(parser.parse_args()))
