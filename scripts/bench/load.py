"""Issue 9's load benchmark: agent-runtime against the pydantic-ai AG-UI peer, side by side, over HTTP/SSE.

Both call one OpenAI-compatible stub process (load_stub.py) that answers each model call after the latency the
question's marker asks for; every run is the demo question's full route (intent -> execution with one
calculator call -> organization, three stages, four model calls). Ours is real `agent-runtime serve`
processes on a fresh database on the local PostgreSQL; the peer is ../shared/bench/peer-pydantic-ai/ in its
own venv (see docs/benchmarks.md "Load" for the set-up). Phases, in one run, ours and the peer alternating:

  warm-up     our sessions get --warm-turns runs each (the peer is sent the same 16-message history)
  saturation  --clients closed-loop clients at zero model latency for --seconds: runs/s, CPU per run
  waves       N concurrent runs at once at --latency (0.5 s per call): completed, wall, p50/p99, TTFT,
              our event-loop lag p99 while they run (our server admits all: MAX_CONCURRENT_RUNS=--high-limit)
  in-flight   ours only: C closed-loop clients for C in --sweep, at 0 and --latency: what a limit buys
  admission   --burst concurrent runs against a server with the default MAX_CONCURRENT_RUNS: 429 latency
  RSS         before and after, MB per 100 runs after the warm-up

    uv run python scripts/bench/load.py [--waves 20,100,200] [--burst 500] [--sweep 32,64,128,200] [--no-peer]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import load_kit
from load_kit import (
    REMEMBER_TEXT,
    Run,
    Server,
    Session,
    Target,
    client,
    create_database,
    curl_burst,
    drop_database,
    loadavg,
    pct,
    start_floor,
    start_ours,
    start_peer,
    start_stub,
    stop_on_sigterm,
    text_for,
)
from load_probes import CpuMeter, CpuUse, refusal_durations, ticker_lags, tree_rss_mb, watch_pool

PEER_DIR = Path("/work/shared/bench/peer-pydantic-ai")
PEER_VENV = Path(__file__).resolve().parents[2] / ".bench/peer"


@dataclass
class Loop:
    runs: list[Run]
    elapsed: float
    cpu: CpuUse
    # The lag probe's samples over the phase (scripts/bench/lag_probe/: a 50 ms ticker in either server's loop).
    lags: list[float] = field(default_factory=list)
    pool_waiting: int = 0  # ours: the most database acquires queued at once (waves only)

    def lag(self) -> str:
        """p99 / max of the loop's lag in ms, and the sample count."""
        return f"{_ms(pct(self.lags, 0.99))} / {_ms(max(self.lags, default=float('nan')))} ({len(self.lags)})"

    @property
    def ok(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def per_second(self) -> float:
        """Completed runs over the whole time, stragglers included (a closed loop's clients end together)."""
        return len(self.ok) / self.elapsed

    def _per_run(self, seconds: float) -> float:
        return 1000 * seconds / max(1, len(self.ok))

    def cpu_ms(self) -> float:
        return self._per_run(self.cpu.server)

    def db_ms(self) -> float:
        return self._per_run(self.cpu.db)

    def side_ms(self) -> str:
        """This load generator's and the stub's CPU per run."""
        return f"{self._per_run(self.cpu.client):.0f} / {self._per_run(self.cpu.stub):.0f}"

    @property
    def cores(self) -> float:
        """The server's CPU over the wall time: how much of a core it got (2 shared cores)."""
        return self.cpu.server / self.elapsed


async def _measured(target: Target) -> tuple[CpuMeter, float]:
    meter = CpuMeter(target.server, target.stub)
    await meter.start()
    return meter, time.time()


async def _lags(target: Target, since: float) -> list[float]:
    until = time.time()
    await asyncio.sleep(0.4)  # the probe writes its samples every 0.25 s
    return ticker_lags(target.server, since, until)


async def closed_loop(
    http: aiohttp.ClientSession, target: Target, sessions: list[Session], latency: float, seconds: float
) -> Loop:
    """One client per session, each starting its next run when the last ends, for `seconds` (stragglers finish)."""
    meter, since = await _measured(target)
    text = text_for(latency)
    runs: list[Run] = []
    t0 = time.monotonic()
    stop_at = t0 + seconds

    async def client_loop(session: Session) -> None:
        while time.monotonic() < stop_at:
            run = await target.run(http, session, text)
            runs.append(run)
            if not run.ok:
                await asyncio.sleep(0.05)

    await asyncio.gather(*(client_loop(s) for s in sessions))
    elapsed = time.monotonic() - t0
    loop = Loop(runs, elapsed, await meter.stop())
    loop.lags = await _lags(target, since)
    return loop


async def wave(http: aiohttp.ClientSession, target: Target, sessions: list[Session], latency: float) -> Loop:
    """All runs started at once."""
    meter, since = await _measured(target)
    text = text_for(latency)
    t0 = time.monotonic()
    peak = [0]
    waiting = asyncio.create_task(watch_pool(target, peak))
    runs = await asyncio.gather(*(target.run(http, s, text) for s in sessions))
    elapsed = time.monotonic() - t0
    waiting.cancel()
    loop = Loop(list(runs), elapsed, await meter.stop())
    loop.lags = await _lags(target, since)
    loop.pool_waiting = peak[0]
    return loop


def _ms(value: float) -> str:
    return f"{1000 * value:,.0f}"


def _failures(runs: list[Run]) -> str:
    errors = Counter(r.error.split(":")[0][:40] if r.status in (0, 200) else str(r.status) for r in runs if not r.ok)
    return ", ".join(f"{k} x{v}" for k, v in errors.most_common(3)) or "-"


def _ratio(ours: float, peer: float) -> str:
    return f"{ours / peer:.2f}x" if peer else "-"


async def phase_saturation(http: aiohttp.ClientSession, targets: list[Target], args: argparse.Namespace) -> None:
    print(f"\n### Saturation, {args.clients} closed-loop clients, zero model latency, {args.seconds:g} s per round")
    print(f"load average before: {loadavg()}\n")
    print(
        "| round | target | runs/s | completed | p50 / p99 run (ms) | CPU ms / run | DB CPU ms / run | "
        "client / stub CPU ms / run | server cores | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    results: dict[str, list[Loop]] = {t.name: [] for t in targets}
    for round_no in range(1, args.rounds + 1):
        for target in targets:
            sessions = await target.ensure_sessions(http, args.clients)
            loop = await closed_loop(http, target, sessions, 0.0, args.seconds)
            results[target.name].append(loop)
            walls = [r.wall for r in loop.ok]
            print(
                f"| {round_no} | {target.name} | {loop.per_second:.2f} | {len(loop.ok)} | {_ms(pct(walls, 0.5))} / "
                f"{_ms(pct(walls, 0.99))} | {loop.cpu_ms():.0f} | {loop.db_ms():.0f} | {loop.side_ms()} | "
                f"{loop.cores:.2f} | {_failures(loop.runs)} |"
            )
    if len(targets) == 2:
        ours, peer = (results[t.name] for t in targets)
        print(
            "\nours / peer per round: throughput "
            + ", ".join(_ratio(o.per_second, p.per_second) for o, p in zip(ours, peer, strict=True))
            + "; CPU per run "
            + ", ".join(_ratio(o.cpu_ms(), p.cpu_ms()) for o, p in zip(ours, peer, strict=True))
            + "; with our DB backends' CPU "
            + ", ".join(_ratio(o.cpu_ms() + o.db_ms(), p.cpu_ms()) for o, p in zip(ours, peer, strict=True))
        )
    print(f"load average after: {loadavg()}")


async def phase_waves(http: aiohttp.ClientSession, targets: list[Target], args: argparse.Namespace) -> None:
    print(f"\n### Concurrent full runs, {args.latency:g} s per model call (ideal: 4 calls = {4 * args.latency:g} s)")
    print(f"load average before: {loadavg()}\n")
    print(
        "| runs | target | completed | wall (s) | run p50 / p99 (s) | first event p50 / p99 (ms) | "
        "first token p50 / p99 (s) | CPU ms / run | server cores | loop lag p99 / max ms (samples); most pool "
        "waiters | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.waves:
        walls: dict[str, float] = {}
        for target in targets:
            sessions = await target.ensure_sessions(http, n)
            loop = await wave(http, target, sessions, args.latency)
            ok = loop.ok
            walls[target.name] = loop.elapsed
            run_t, ttfe, ttft = [r.wall for r in ok], [r.ttfe for r in ok], [r.ttft for r in ok]
            lag = loop.lag() if target.peer else f"{loop.lag()}; {loop.pool_waiting}"
            print(
                f"| {n} | {target.name} | {len(ok)}/{n} | {loop.elapsed:.1f} | {pct(run_t, 0.5):.2f} / "
                f"{pct(run_t, 0.99):.2f} | {_ms(pct(ttfe, 0.5))} / {_ms(pct(ttfe, 0.99))} | {pct(ttft, 0.5):.2f} / "
                f"{pct(ttft, 0.99):.2f} | {loop.cpu_ms():.0f} | {loop.cores:.2f} | {lag} | {_failures(loop.runs)} |"
            )
        if len(walls) == 2:
            ours, peer = walls.values()
            print(f"| {n} | ours / peer wall | | {_ratio(ours, peer)} | | | | | | | |")
    print(f"\nload average after: {loadavg()}")


async def phase_in_flight(http: aiohttp.ClientSession, ours: Target, args: argparse.Namespace) -> None:
    print(f"\n### Ours: runs in flight (closed loop, {args.seconds:g} s each): what MAX_CONCURRENT_RUNS buys")
    print(f"load average before: {loadavg()}\n")
    print(
        "| in flight | model latency | runs/s | run p50 / p99 (s) | first token p99 (s) | loop lag p99 / max ms "
        "(samples) | CPU ms / run | server cores | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for latency in args.sweep_latencies or (0.0, args.latency):
        for clients in args.sweep:
            sessions = await ours.ensure_sessions(http, clients)
            loop = await closed_loop(http, ours, sessions, latency, args.seconds)
            run_t, ttft = [r.wall for r in loop.ok], [r.ttft for r in loop.ok]
            print(
                f"| {clients} | {latency:g} s | {loop.per_second:.2f} | {pct(run_t, 0.5):.2f} / "
                f"{pct(run_t, 0.99):.2f} | {pct(ttft, 0.99):.2f} | {loop.lag()} | "
                f"{loop.cpu_ms():.0f} | {loop.cores:.2f} | {_failures(loop.runs)} |"
            )
    print(f"\nload average after: {loadavg()}")


async def phase_burst(
    http: aiohttp.ClientSession, targets: list[Target], args: argparse.Namespace, workdir: Path
) -> None:
    limit = args.burst_limit or "the default"
    print(f"\n### {args.burst} concurrent runs at {args.latency:g} s per call, ours with MAX_CONCURRENT_RUNS {limit}")
    print(f"load average before: {loadavg()}\n")
    print(
        "| target | completed | 429 | other failures | 429 latency p50 / p99 / max (ms) | 429 server-side p50 / p99 "
        "(ms) | completed runs' wall p50 / p99 (s) | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    steady: list[float] = []
    for target in targets:
        sessions = await target.ensure_sessions(http, args.burst + (0 if target.peer else 100))
        burst = asyncio.create_task(wave(http, target, sessions[: args.burst], args.latency))
        if not target.peer:
            # Once the burst is dealt with, while the admitted runs still run: 100 requests one after another,
            # the refusal's own latency when requests arrive steadily rather than all at once.
            await asyncio.sleep(4)
            for session in sessions[args.burst :]:
                run = await target.run(http, session, text_for(args.latency))
                if run.status == 429:
                    steady.append(run.wall)
                if burst.done():
                    break
        loop = await burst
        refused = [r.wall for r in loop.runs if r.status == 429]
        other = [r for r in loop.runs if not r.ok and r.status != 429]
        done = [r.wall for r in loop.ok]
        refusal = f"{_ms(pct(refused, 0.5))} / {_ms(pct(refused, 0.99))} / {_ms(max(refused))}" if refused else "-"
        # The burst's refusals are all logged before the one-at-a-time ones start (4 s later).
        inside = refusal_durations(target.server, len(refused)) if refused else []
        server_side = f"{pct(inside, 0.5):,.0f} / {pct(inside, 0.99):,.0f}" if inside else "-"
        print(
            f"| {target.name} | {len(done)} | {len(refused)} | {len(other)} {_failures(other)} | {refusal} | "
            f"{server_side} | "
            f"{pct(done, 0.5):.2f} / {pct(done, 0.99):.2f} | {loop.elapsed:.1f} |"
        )
    # The same burst against servers that only refuse: what the load generator, the kernel and a bare HTTP server
    # cost here, below anything an app can do. Then all of it again from curl (C, one process): aiohttp's own
    # share of a burst of 500 on these two cores is most of the floor.
    sessions = targets[0].sessions[: args.burst]
    floors = {kind: await start_floor(kind, workdir) for kind in ("raw", "uvicorn")}
    try:
        for kind, server in floors.items():
            floor = Target(f"floor: {kind}", server)
            t0 = time.monotonic()
            runs = await asyncio.gather(*(floor.run(http, s, text_for(args.latency)) for s in sessions))
            _refusal_row(floor.name, [(r.status, r.wall) for r in runs], time.monotonic() - t0)
        if not shutil.which("curl"):
            print("\n(curl not found: the rows from curl are left out)")
        else:
            for name, base in [("ours", targets[0].server.base), *((f"floor: {k}", f.base) for k, f in floors.items())]:
                t0 = time.monotonic()
                answers = await curl_burst(base, sessions, text_for(args.latency), workdir)
                _refusal_row(f"{name}, from curl", answers, time.monotonic() - t0)
    finally:
        for server in floors.values():
            server.stop()
    if steady:
        print(
            f"\nours, 100 requests one at a time while full (4 s after the burst): 429 latency p50 / p99 / max "
            f"{_ms(pct(steady, 0.5))} / {_ms(pct(steady, 0.99))} / {_ms(max(steady))} ms"
        )
    print(f"\nload average after: {loadavg()}")


def _refusal_row(name: str, answers: list[tuple[int, float]], elapsed: float) -> None:
    refused = [wall for status, wall in answers if status == 429]
    done = [wall for status, wall in answers if status == 200]
    other = len(answers) - len(refused) - len(done)
    latency = f"{_ms(pct(refused, 0.5))} / {_ms(pct(refused, 0.99))} / {_ms(max(refused))}" if refused else "-"
    walls = f"{pct(done, 0.5):.2f} / {pct(done, 0.99):.2f}" if done else "-"
    print(f"| {name} | {len(done)} | {len(refused)} | {other} | {latency} | - | {walls} | {elapsed:.1f} |")


async def phase_soak(http: aiohttp.ClientSession, targets: list[Target], args: argparse.Namespace) -> None:
    """Our RSS while --soak runs go through --clients closed-loop clients at zero latency, sampled every fifth."""
    print(f"\n### RSS over {args.soak} runs after the warm-up ({args.clients} clients, zero latency), MB")
    print(f"load average before: {loadavg()}\n")
    step = args.soak // 5
    for target in targets:
        sessions = await target.ensure_sessions(http, args.clients)
        samples = [tree_rss_mb(target.server.pid)]
        for _ in range(5):
            goal = target.completed + step
            while target.completed < goal:
                await asyncio.gather(*(target.run(http, s, text_for(0.0)) for s in sessions))
            samples.append(tree_rss_mb(target.server.pid))
        growth = (samples[-1] - samples[1]) / (4 * step) * 100
        print(
            f"- {target.name}: {' / '.join(f'{v:.1f}' for v in samples)}; after the first {step} runs "
            f"{growth:+.2f} MB per 100 runs"
        )
    print(f"load average after: {loadavg()}")


async def warm_up(http: aiohttp.ClientSession, targets: list[Target], args: argparse.Namespace) -> None:
    """Each of our sessions gets --warm-turns runs (their memory window fills like the peer's history); the peer,
    whose history is sent by the client, one round of --clients runs (its process warms up)."""
    sessions_needed = max([*args.waves, *args.sweep, args.clients])
    print(f"warm-up: {sessions_needed} sessions x {args.warm_turns} runs, load average {loadavg()}", flush=True)
    for target in targets:
        sessions = await target.ensure_sessions(http, args.clients if target.peer else sessions_needed)
        for _ in range(1 if target.peer else args.warm_turns):
            semaphore = asyncio.Semaphore(args.clients)

            # With --remember each of our users first tells a fact, which long-term memories keep (when on): its
            # later turns then recall it by meaning, as a returning user's do.
            text = f"{REMEMBER_TEXT} {text_for(0.0)}" if args.remember and not target.peer else text_for(0.0)

            async def one(
                session: Session, target: Target = target, semaphore: asyncio.Semaphore = semaphore, text: str = text
            ) -> Run:
                async with semaphore:
                    return await target.run(http, session, text)

            runs = await asyncio.gather(*(one(s) for s in sessions))
            if not all(r.ok for r in runs):
                raise SystemExit(f"warm-up failed on {target.name}: {_failures(list(runs))}")


# What the libraries we must use take by being imported: the floor our RSS is compared with (issue 30).
FLOOR_MODULES = ("litellm", "crewai", "fastapi", "asyncpg", "uvicorn")


def import_floor_mb() -> float:
    code = f"import {', '.join(FLOOR_MODULES)}; print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return int(done.stdout.split()[-1]) / 1024


def _rss(targets: list[Target]) -> dict[str, float]:
    return {t.name: tree_rss_mb(t.server.pid) for t in targets}


async def main(args: argparse.Namespace) -> None:
    load_kit.PIN = args.pin
    load_kit.WORKERS = args.workers
    load_kit.PEER_WORKERS = args.peer_workers
    workdir = Path(tempfile.mkdtemp(prefix="agent-runtime-load-"))
    database_url = await create_database()
    servers: list[Server] = []
    try:
        stub = await start_stub(workdir)
        servers.append(stub)
        high = {"MAX_CONCURRENT_RUNS": str(args.high_limit)}
        ours = Target("ours", await start_ours("ours_high", database_url, stub, workdir, high), stub=stub)
        servers.append(ours.server)
        targets = [ours]
        if not args.no_peer:
            peer = await start_peer(args.peer_dir, args.peer_venv, stub, workdir)
            targets.append(Target("peer", peer, peer=True, stub=stub))
            servers.append(targets[1].server)
        print(
            f"servers ready (workers: ours {args.workers}, peer {args.peer_workers}); logs in {workdir}; "
            f"cores: 2 shared; load average {loadavg()}"
        )
        rss_start = _rss(targets)
        async with client() as http:
            await warm_up(http, targets, args)
            rss_warm = _rss(targets)
            runs0 = {t.name: t.completed for t in targets}
            if args.rounds:
                await phase_saturation(http, targets, args)
            if args.waves:
                await phase_waves(http, targets, args)
            if args.sweep:
                await phase_in_flight(http, ours, args)
            rss_end = _rss(targets)
            floor = import_floor_mb()
            print("\n### RSS (MB): at start / after warm-up / at the end; growth per 100 runs after warm-up")
            print(f'(the import floor, `python -c "import {", ".join(FLOOR_MODULES)}"`: {floor:.0f} MB)')
            for t in targets:
                runs = t.completed - runs0[t.name]
                per100 = (rss_end[t.name] - rss_warm[t.name]) / max(1, runs) * 100
                print(
                    f"- {t.name}: {rss_start[t.name]:.0f} / {rss_warm[t.name]:.0f} / {rss_end[t.name]:.0f}; "
                    f"{per100:+.2f} MB per 100 runs ({runs} runs); "
                    f"{rss_warm[t.name] / floor:.2f}x / {rss_end[t.name] / floor:.2f}x the floor"
                )
            if args.soak:
                await phase_soak(http, [ours], args)
            if args.burst:
                ours.server.stop()
                limit = {"MAX_CONCURRENT_RUNS": str(args.burst_limit)} if args.burst_limit else {}
                server = await start_ours("ours_default", database_url, stub, workdir, limit)
                default = Target("ours", server, stub=stub)
                servers.append(default.server)
                default.sessions = ours.sessions
                await phase_burst(http, [default, *targets[1:]], args, workdir)
    finally:
        for server in reversed(servers):
            server.stop()
        await drop_database(database_url)
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v]


def _floats(value: str) -> list[float]:
    return [float(v) for v in value.split(",") if v]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.5, help="model latency per call in the waves (s)")
    parser.add_argument("--waves", type=_ints, default=[20, 100, 200], help="concurrent runs per wave")
    parser.add_argument("--burst", type=int, default=500, help="runs at once against the default limit (0: skip)")
    parser.add_argument(
        "--burst-limit", type=int, default=0, help="our MAX_CONCURRENT_RUNS for the burst (0: the shipped default)"
    )
    parser.add_argument("--clients", type=int, default=32, help="closed-loop clients for saturation")
    parser.add_argument("--seconds", type=float, default=20, help="length of each closed-loop measurement")
    parser.add_argument("--rounds", type=int, default=2, help="saturation rounds (ours and peer alternate)")
    parser.add_argument("--sweep", type=_ints, default=[32, 64, 128, 200], help="our in-flight counts ('' skips)")
    parser.add_argument("--sweep-latencies", type=_floats, help="model latencies of the sweep (default: 0,--latency)")
    parser.add_argument("--warm-turns", type=int, default=4, help="warm-up runs per session (4 = peer's history)")
    parser.add_argument(
        "--remember", action="store_true", help="our warm-up turns tell a fact for long-term memories to keep"
    )
    parser.add_argument("--high-limit", type=int, default=256, help="our MAX_CONCURRENT_RUNS for the waves")
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    parser.add_argument("--peer-venv", type=Path, default=PEER_VENV)
    parser.add_argument("--soak", type=int, default=0, help="runs for the RSS soak after the other phases (0: skip)")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--pin", help="run each server under `taskset -c PIN` (e.g. 1: one core, the same for both)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    parser.add_argument("--workers", type=int, default=1, help="our WORKERS (server processes on the port)")
    parser.add_argument("--peer-workers", type=int, default=1, help="the peer's uvicorn --workers")
    args = parser.parse_args()
    peer_files = (args.peer_venv / "bin/uvicorn", args.peer_dir / "peer_app.py")
    if not args.no_peer and not all(path.exists() for path in peer_files):
        parser.error(
            f"the pydantic-ai peer is not set up ({' or '.join(str(p) for p in peer_files if not p.exists())} "
            'missing): see docs/benchmarks.md "Load", or pass --no-peer'
        )
    stop_on_sigterm()
    asyncio.run(main(args))
