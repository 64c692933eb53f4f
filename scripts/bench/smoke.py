"""Runs every benchmark in scripts/bench/ once on tiny settings, so that none rots unnoticed (CI runs this).

    uv run python scripts/bench/smoke.py                     # all of them, one after another (3-4 min on 2 cores)
    uv run python scripts/bench/smoke.py --only flow.py      # some (repeat the option)
    uv run python scripts/bench/smoke.py --show-output       # also print each benchmark's output

Each benchmark runs as a subprocess (a session of its own) with the smallest settings its options allow (BENCHMARKS
below), under a timeout. It fails when it exits non-zero, when the timeout passes (SIGINT to its process group first,
so that it stops its servers and drops its database; SIGKILL 30 s later), or when its output lacks the line it always
prints once it has measured something (a table header or a summary line). The numbers are not checked: on tiny
settings they are noise. Every script in scripts/bench/ is listed here, as a benchmark or as a helper: a new one that
is neither stops the smoke before anything runs.

PostgreSQL as for the tests: TEST_DATABASE_URL, else 127.0.0.1:5432, else an embedded one (started once, passed to
every benchmark). load.py and event_log.py find theirs through load_kit.py (BENCH_ADMIN_URL, else 127.0.0.1:5432),
which needs a server URL without a query: with only the embedded server they cannot run, which fails the smoke when
CI is set and is reported as a skip elsewhere. http_parser.py is given a database made for it (DATABASE_URL), dropped
after. load.py runs with --no-peer: the pydantic-ai peer is not installed in CI.

Left out on purpose, being long and optional: the soaks (flow.py and load.py --soak) and conversation_cost.py's
`thinking` extra (three conversations of a fixed 30 turns).

Exit status: 0 when every benchmark passed (or was skipped, outside CI); 1 when one failed, named, with the tail of
its output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.database import PgServer, create_database, drop_database, find_server  # noqa: E402

BENCH_DIR = ROOT / "scripts" / "bench"
# What the benchmarks import or start, and this script (lag_probe/ is a directory: no *.py here).
HELPERS = {"load_kit.py", "load_probes.py", "load_stub.py", "refusal_floor.py", "serve_patched.py", "smoke.py"}
TAIL_LINES = 40
KILL_GRACE_SECONDS = 30

# How a benchmark finds its PostgreSQL.
OPTION = "--database-url"  # creates and drops its own database on the server of this admin URL
ADMIN_ENV = "BENCH_ADMIN_URL"  # the same, through load_kit.py
DATABASE_ENV = "DATABASE_URL"  # a database the smoke creates for it and drops after
NO_DATABASE = ""


@dataclass(frozen=True)
class Benchmark:
    script: str
    args: str  # its options, split as a shell would
    marker: str  # printed by every run that got as far as measuring
    timeout: float  # seconds: several times its wall time on 2 shared, busy cores
    database: str = NO_DATABASE


BENCHMARKS = (
    Benchmark("memory.py", "--turns 2", "| messages | implementation | turns |", 120, OPTION),
    Benchmark(
        "flow.py",
        "--runs 2 --concurrency 2 --latency 0.05 --history 2 --breakdown 1",
        "Breakdown (--breakdown):",
        150,
        OPTION,
    ),
    Benchmark(
        "orchestration.py",
        "--runs 2 --concurrency 2 --latency 0.05 --batches 1",
        "loop lag ms with no turn at all",
        120,
    ),
    Benchmark("llm_overhead.py", "--rounds 2 --warmup 1", "vs litellm, paired median ms", 90),
    Benchmark(
        "conversation_cost.py",
        "--turns 3 --tools yes --policies 'no window,cut 20/8k to 10/4k + summary' --extras layout,users --users 2",
        "| configuration | prompt tokens |",
        180,
        OPTION,
    ),
    Benchmark(
        "conversation_recall.py",
        "--turns 4 --tools yes --configurations shipped --intervals 1024",
        "| configuration | tools |",
        180,
        OPTION,
    ),
    Benchmark("overload.py", "--budgets 2 --answer-seconds 0.05", "| LLM_OVERLOAD_WAIT_SECONDS, storm |", 120, OPTION),
    Benchmark("http_parser.py", "--requests 200 --rounds 1 --warmup-seconds 0", "h11 / httptools:", 180, DATABASE_ENV),
    Benchmark(
        "load.py",
        "--no-peer --waves 2 --clients 2 --seconds 1 --rounds 1 --warm-turns 1 --sweep 2 --sweep-latencies 0 "
        "--latency 0.1 --burst 4 --burst-limit 2",
        "### RSS (MB)",
        240,
        ADMIN_ENV,
    ),
    Benchmark(
        "event_log.py",
        "--live 2 --latency 0.1 --clients 2 --seconds 1 --rounds 1",
        "complete and in order on B:",
        300,
        ADMIN_ENV,
    ),
    # DBOS is not a dependency: here it only says how to run it with DBOS (docs/benchmarks.md, "Durable steps").
    Benchmark("durable_steps.py", "--runs 2 --rounds 1", "uv run --with dbos", 60, NO_DATABASE),
    Benchmark(
        "takeover.py",
        "--runs 2 --latency 0.5 --lease 2 --sweep 0.5",
        "| runs | kill to claim (p50 / max) |",
        180,
        ADMIN_ENV,
    ),
    Benchmark(
        "memory_recall.py",
        "--big 10 --others 1 --distractors 2 --samples 2",
        "| measure | result | target |",
        180,
        OPTION,
    ),
)


@dataclass
class Outcome:
    benchmark: Benchmark
    status: str  # ok | failed | skipped
    seconds: float
    detail: str = ""  # why it failed or was skipped
    output: str = ""


def unlisted_scripts() -> list[str]:
    """Scripts in scripts/bench/ that are neither a benchmark here nor a helper, and listed ones that are gone."""
    present = {path.name for path in BENCH_DIR.glob("*.py")} - HELPERS
    listed = {b.script for b in BENCHMARKS}
    return [f"{name}: not in BENCHMARKS or HELPERS of smoke.py" for name in sorted(present - listed)] + [
        f"{name}: in BENCHMARKS of smoke.py but not in scripts/bench/" for name in sorted(listed - present)
    ]


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to the benchmark's process group (its `finally` stops its servers and drops its database), then
    SIGKILL if it is still there after KILL_GRACE_SECONDS."""
    _signal_group(proc.pid, signal.SIGINT)
    try:
        proc.wait(KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def run_one(benchmark: Benchmark, extra: tuple[str, ...], env: dict[str, str]) -> Outcome:
    argv = [sys.executable, str(BENCH_DIR / benchmark.script), *extra, *shlex.split(benchmark.args)]
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        # A session of its own: a timeout reaches whatever it started in its group (stubs, servers without one).
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            proc.wait(benchmark.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc)
        except KeyboardInterrupt:  # Ctrl-C reaches the smoke only: pass it on, let the benchmark clean up
            _stop(proc)
            raise
        finally:
            _signal_group(proc.pid, signal.SIGKILL)  # anything of its group left behind (it has exited by now)
        seconds = time.perf_counter() - started
        out.seek(0)
        output = out.read().decode(errors="replace")
    if timed_out:
        return Outcome(benchmark, "failed", seconds, f"timed out after {benchmark.timeout:g} s", output)
    if proc.returncode != 0:
        return Outcome(benchmark, "failed", seconds, f"exit status {proc.returncode}", output)
    if benchmark.marker not in output:
        return Outcome(benchmark, "failed", seconds, f"no {benchmark.marker!r} in its output", output)
    return Outcome(benchmark, "ok", seconds, output=output)


def _load_kit_url(server: PgServer) -> str | None:
    """The admin URL load_kit.py can use: BENCH_ADMIN_URL as set, else the server's (a TCP one: no query)."""
    if os.environ.get(ADMIN_ENV):
        return os.environ[ADMIN_ENV]
    if server.embedded is None and "?" not in server.admin_url:
        return server.admin_url
    return None


def run_all(benchmarks: list[Benchmark], server: PgServer, show_output: bool) -> list[Outcome]:
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    load_kit_url = _load_kit_url(server)
    outcomes: list[Outcome] = []
    for benchmark in benchmarks:
        env = dict(base_env)
        extra: tuple[str, ...] = ()
        database = ""
        if benchmark.database == OPTION:
            extra = (OPTION, server.admin_url)
        elif benchmark.database == ADMIN_ENV:
            if load_kit_url is None:
                reason = (
                    "needs a PostgreSQL server over TCP (127.0.0.1:5432, TEST_DATABASE_URL or BENCH_ADMIN_URL): "
                    "load_kit.py cannot use the embedded one"
                )
                outcomes.append(_report(Outcome(benchmark, "failed" if os.environ.get("CI") else "skipped", 0, reason)))
                continue
            env[ADMIN_ENV] = load_kit_url
        elif benchmark.database == DATABASE_ENV:
            database = asyncio.run(create_database(server, prefix="agent_runtime_bench_smoke"))
            env[DATABASE_ENV] = server.url_for(database)
        try:
            outcome = run_one(benchmark, extra, env)
        finally:
            if database:
                asyncio.run(drop_database(server, database))
        outcomes.append(_report(outcome))
        if show_output:
            print(outcome.output, flush=True)
    return outcomes


def _host(url: str) -> str:
    """Where a server is, without its credentials (CI logs this line)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 5432}" if parts.hostname else "a Unix socket"


def _report(outcome: Outcome) -> Outcome:
    b = outcome.benchmark
    detail = f"  ({outcome.detail})" if outcome.detail and outcome.status != "failed" else ""
    print(f"{b.script:<21} {outcome.status:<7} {outcome.seconds:6.1f} s  {b.args}{detail}", flush=True)
    return outcome


def summary(outcomes: list[Outcome], wall: float) -> int:
    failed = [o for o in outcomes if o.status == "failed"]
    skipped = [o for o in outcomes if o.status == "skipped"]
    for o in failed:
        tail = "\n".join(o.output.rstrip().splitlines()[-TAIL_LINES:])
        print(f"\nFAILED {o.benchmark.script}: {o.detail}")
        if tail:
            print(f"--- last {TAIL_LINES} lines of its output ---\n{tail}\n---")
    for o in skipped:
        print(f"\nSKIPPED {o.benchmark.script}: {o.detail} (with CI set this fails)")
    passed = len(outcomes) - len(failed) - len(skipped)
    print(f"\n{passed} passed, {len(failed)} failed, {len(skipped)} skipped in {wall:.0f} s")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [b.script for b in BENCHMARKS]
    parser.add_argument("--only", action="append", choices=names, help="run this benchmark only (repeatable)")
    parser.add_argument("--show-output", action="store_true", help="print each benchmark's output after its line")
    args = parser.parse_args()
    problems = unlisted_scripts()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(1)
    selected = [b for b in BENCHMARKS if not args.only or b.script in args.only]
    started = time.perf_counter()
    server = asyncio.run(find_server())
    try:
        where = "an embedded one" if server.embedded is not None else _host(server.admin_url)
        print(f"{len(selected)} benchmarks on tiny settings, one at a time; PostgreSQL: {where}", flush=True)
        outcomes = run_all(selected, server, args.show_output)
    finally:
        if server.embedded is not None:
            server.embedded.stop()
    raise SystemExit(summary(outcomes, time.perf_counter() - started))


if __name__ == "__main__":
    main()
