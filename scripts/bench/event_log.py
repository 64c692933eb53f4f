"""Issue 11's benchmark: what the run event log costs, and how fast a stream resumes on another replica.

Three `agent-runtime serve` processes on one fresh database, all started through serve_patched.py, which counts
every SQL statement by kind on /metrics (`bench_sql_statements_total`): A and B with the event log as shipped,
N with the log's database write made a no-op (BENCH_EVENT_LOG=off). One stub (load_stub.py); every run is the
demo question's full route. Phases:

  statements  closed-loop full runs on A (zero model latency): statements per run by kind, log writes per run
  CPU         A (log) and N (no log) at the same time, closed loops at zero latency: CPU ms per run (and PG)
  finished    resume finished runs on B (Last-Event-ID = <run_id>:3): time to the first replayed frame,
              one at a time and --live at once
  live        --live runs in flight on A at --latency per call; after a run's 4th frame its stream is resumed on B
              from <run_id>:1: time to the first frame (those events are still only in A's memory: B asks A over
              NOTIFY to write them), and each later event's arrival on B minus its arrival on A's own stream

    uv run python scripts/bench/event_log.py [--live 100] [--seconds 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import asyncpg
from load import closed_loop
from load_kit import (
    ROOT,
    Run,
    Server,
    Session,
    Target,
    client,
    create_database,
    drop_database,
    loadavg,
    pct,
    start_ours,
    start_stub,
    stop_on_sigterm,
    text_for,
)
from load_probes import statement_counts

PATCHED = [sys.executable, str(ROOT / "scripts/bench/serve_patched.py"), "serve"]


def _ms(value: float) -> str:
    return f"{1000 * value:,.1f}"


async def phase_statements(
    http: aiohttp.ClientSession, a: Target, sessions: list[Session], seconds: float, database_url: str
) -> list[Run]:
    before = await statement_counts(a.server)
    loop = await closed_loop(http, a, sessions, 0.0, seconds)
    await asyncio.sleep(1)  # a run's last write may follow its stream's end by a moment
    delta = await statement_counts(a.server) - before
    runs = len(loop.ok)
    per_run = {k: v / runs for k, v in sorted(delta.items()) if not k.startswith("keeper")}
    print(f"\n### Statements per full run on A ({runs} runs, {len(sessions)} closed-loop clients, zero latency)")
    print("\n| kind | per run |\n|---|---|")
    for kind, value in per_run.items():
        print(f"| {kind} | {value:.2f} |")
    print(f"| **total** | **{sum(per_run.values()):.2f}** |")
    conn = await asyncpg.connect(database_url)
    try:
        size = await conn.fetchrow(
            "SELECT count(*)::float / count(DISTINCT run_id) AS events,"
            " sum(length(data))::float / count(DISTINCT run_id) AS bytes FROM agent_run_events"
        )
    finally:
        await conn.close()
    print(f"\nevents stored per run: {size['events']:.1f}, {size['bytes'] / 1024:.1f} KiB of JSON (all of A's runs)")
    keeper = ", ".join(f"{k} {v}" for k, v in sorted(delta.items()) if k.startswith("keeper")) or "none"
    print(f"\n(left out: the lease keeper's statements, one per interval per process, not per run: {keeper})")
    return loop.ok


async def phase_cpu(
    http: aiohttp.ClientSession, on: Target, off: Target, sessions: list[Session], args: argparse.Namespace
) -> None:
    """A and N under the same load at the same time (half the clients each, sessions swapped every round), so
    that the shared machine's ups and downs hit both arms alike."""
    if args.rounds == 0:
        return
    half = len(sessions) // 2
    print(f"\n### CPU per full run, event log on (A) and its writes off (N), at the same time, {half} clients each")
    print(f"load average before: {loadavg()}\n")
    print("| round | log | runs/s | CPU ms / run (server) | PostgreSQL backends ms / run | both |")
    print("|---|---|---|---|---|---|")
    shares: list[float] = []
    for round_no in range(1, args.rounds + 1):
        first, second = (sessions[:half], sessions[half:]) if round_no % 2 else (sessions[half:], sessions[:half])
        loops = await asyncio.gather(
            closed_loop(http, on, first, 0.0, args.seconds), closed_loop(http, off, second, 0.0, args.seconds)
        )
        both = [loop.cpu_ms() + loop.db_ms() for loop in loops]
        for target, loop, total in zip((on, off), loops, both, strict=True):
            print(
                f"| {round_no} | {target.name} | {loop.per_second:.2f} | {loop.cpu_ms():.1f} | {loop.db_ms():.1f} | "
                f"{total:.1f} |"
            )
        shares.append(100 * (both[0] - both[1]) / both[0])
    listed = ", ".join(f"{v:+.1f} %" for v in shares)
    print(
        f"\nthe log's share of CPU per run, (A - N) / A, per round: {listed}; median {statistics.median(shares):+.1f} %"
    )
    print(f"load average after: {loadavg()}")


async def resume_first_frame(
    http: aiohttp.ClientSession, b: Target, session: Session, run_id: str, after: int
) -> float:
    url = f"{b.server.base}/v1/sessions/{session.id}/runs/{run_id}/events"
    headers = {"Authorization": f"Bearer {session.token}", "Last-Event-ID": f"{run_id}:{after}"}
    t0 = time.perf_counter()
    async with http.get(url, headers=headers) as r:
        if r.status != 200:
            raise SystemExit(f"resume: HTTP {r.status} {await r.text()}")
        async for raw in r.content:
            if raw.startswith(b"data:"):
                return time.perf_counter() - t0
    raise SystemExit("resume: no frame")


async def phase_finished(http: aiohttp.ClientSession, b: Target, done: list[tuple[Session, str]], n: int) -> None:
    print("\n### Resuming finished runs on B (Last-Event-ID <run_id>:3), time to the first replayed frame (ms)")
    print(f"load average: {loadavg()}\n")
    print("| how | n | p50 | p99 | max |\n|---|---|---|---|---|")
    sample = done[:n]
    for s, run_id in sample[:5]:  # B's first requests open its pool's connections: not what is measured
        await resume_first_frame(http, b, s, run_id, 3)
    one_by_one = [await resume_first_frame(http, b, s, run_id, 3) for s, run_id in sample]
    at_once = await asyncio.gather(*(resume_first_frame(http, b, s, run_id, 3) for s, run_id in sample))
    for how, values in (("one at a time", one_by_one), (f"{len(sample)} at once", list(at_once))):
        print(f"| {how} | {len(values)} | {_ms(pct(values, 0.5))} | {_ms(pct(values, 0.99))} | {_ms(max(values))} |")


@dataclass
class Followed:
    first_frame: float = -1.0
    live_lags: list[float] = field(default_factory=list)
    complete: bool = False
    error: str = ""


async def followed_run(http: aiohttp.ClientSession, a: Target, b: Target, session: Session, latency: float) -> Followed:
    """A run on A, read there to the end; after its 4th frame, the same run resumed on B from seq 1."""
    result = Followed()
    on_a: dict[int, float] = {}
    on_b: dict[int, float] = {}
    seen_four = asyncio.Event()
    run_id = ""

    async def read_a() -> None:
        nonlocal run_id
        url = f"{a.server.base}/v1/sessions/{session.id}/runs"
        async with http.post(
            url, headers={"Authorization": f"Bearer {session.token}"}, json={"message": text_for(latency)}
        ) as r:
            async for raw in r.content:
                if raw.startswith(b"id:"):
                    run_id, _, seq = raw[3:].strip().decode().rpartition(":")
                    on_a[int(seq)] = time.perf_counter()
                    if int(seq) >= 4:
                        seen_four.set()
        seen_four.set()

    async def read_b() -> None:
        await seen_four.wait()
        if not run_id:
            result.error = "no frames on A"
            return
        url = f"{b.server.base}/v1/sessions/{session.id}/runs/{run_id}/events"
        headers = {"Authorization": f"Bearer {session.token}", "Last-Event-ID": f"{run_id}:1"}
        t0 = time.perf_counter()
        async with http.get(url, headers=headers) as r:
            if r.status != 200:
                result.error = f"HTTP {r.status}"
                return
            async for raw in r.content:
                if raw.startswith(b"id:"):
                    now = time.perf_counter()
                    on_b[int(raw.decode().rpartition(":")[2])] = now
                    if result.first_frame < 0:
                        result.first_frame = now - t0

    await asyncio.gather(read_a(), read_b())
    if on_b and not result.error:
        caught_up = min(on_b.values()) + result.first_frame  # events emitted after B's replay: live ones
        result.live_lags = [on_b[s] - t for s, t in on_a.items() if s in on_b and t > caught_up]
        result.complete = sorted(on_b) == [s for s in sorted(on_a) if s > 1]
        if not result.complete:
            result.error = f"B saw {sorted(on_b)[:3]}..{len(on_b)} of A's {len(on_a)}"
    return result


async def phase_live(
    http: aiohttp.ClientSession, a: Target, b: Target, sessions: list[Session], latency: float
) -> None:
    print(f"\n### Resuming live runs on B: {len(sessions)} runs in flight on A, {latency:g} s per model call")
    print(f"load average before: {loadavg()}")
    before = await statement_counts(a.server)
    results = await asyncio.gather(*(followed_run(http, a, b, s, latency) for s in sessions))
    await asyncio.sleep(1)
    writes = (await statement_counts(a.server) - before)["events"]
    firsts = [r.first_frame for r in results if r.first_frame >= 0]
    lags = [lag for r in results for lag in r.live_lags]
    errors = Counter(r.error for r in results if r.error)
    print("\n| measure | n | p50 (ms) | p99 (ms) | max (ms) |\n|---|---|---|---|---|")
    print(
        f"| first frame on B (seq 2, only in A's memory) | {len(firsts)} | {_ms(pct(firsts, 0.5))} | "
        f"{_ms(pct(firsts, 0.99))} | {_ms(max(firsts))} |"
    )
    print(
        f"| live event on B after it reached A's client | {len(lags)} | {_ms(pct(lags, 0.5))} | "
        f"{_ms(pct(lags, 0.99))} | {_ms(max(lags))} |"
    )
    print(f"\ncomplete and in order on B: {sum(r.complete for r in results)}/{len(results)}; errors: {dict(errors)}")
    print(f"log writes (statements) per followed run on A: {writes / len(sessions):.1f}")
    print(f"load average after: {loadavg()}")


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="agent-runtime-eventlog-"))
    database_url = await create_database()
    servers: list[Server] = []
    try:
        stub = await start_stub(workdir)
        servers.append(stub)
        count = {"BENCH_COUNT_SQL": "1", "BENCH_NO_REPAIR": "1", "MAX_CONCURRENT_RUNS": "256"}
        targets: list[Target] = []
        for name, env in (("A", count), ("B", count), ("N", {**count, "BENCH_EVENT_LOG": "off"})):
            targets.append(Target(name, await start_ours(f"ours_{name}", database_url, stub, workdir, env, PATCHED)))
            servers.append(targets[-1].server)
        a, b, n = targets
        print(f"servers ready; logs in {workdir}; 2 shared cores; load average {loadavg()}")
        async with client() as http:
            sessions = await a.ensure_sessions(http, max(args.live, args.clients))
            n.sessions = b.sessions = a.sessions
            print("warm-up: 5 s of runs on each server", flush=True)
            for target in targets:
                await closed_loop(http, target, sessions[: args.clients], 0.0, 5)
            done = await phase_statements(http, a, sessions[: args.clients], args.seconds, database_url)
            await phase_cpu(http, a, n, sessions[: args.clients], args)
            by_id = {s.id: s for s in sessions}
            finished = [(by_id[r.session_id], r.run_id) for r in done]
            await phase_finished(http, b, finished, args.live)
            await phase_live(http, a, b, sessions[: args.live], args.latency)
    finally:
        for server in reversed(servers):
            server.stop()
        await drop_database(database_url)
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", type=int, default=100, help="runs in flight while resuming (and resumes of finished)")
    parser.add_argument("--latency", type=float, default=0.5, help="model latency per call for live runs (s)")
    parser.add_argument("--clients", type=int, default=16, help="closed-loop clients (statements; CPU: half per arm)")
    parser.add_argument("--seconds", type=float, default=20, help="length of each closed-loop measurement")
    parser.add_argument(
        "--rounds", type=int, default=6, help="CPU rounds (both arms at once, sessions swapped; 0 skips)"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    stop_on_sigterm()
    asyncio.run(main(parser.parse_args()))
