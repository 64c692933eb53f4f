"""Issue 33's comparison: what recording a run's steps costs, in our own tables against DBOS Transact.

    uv run --with dbos python scripts/bench/durable_steps.py [--runs 200] [--steps 5] [--rounds 3] [--payload 300]

DBOS is not a project dependency: it comes only with `--with dbos` (without it this says so and exits 0). Two scratch
databases on the local PostgreSQL (127.0.0.1:5432, user postgres). A simulated turn of --steps steps (intent answer,
tool call, tool result, execution answer, organization answer), --payload bytes each:
  ours  what our design adds to a run: the resume point's UPDATE (engine/runs/takeover/repository.py) on a table
        shaped like agent_runs, with asyncpg (the input rides in the start statement; tool rows existed before);
  DBOS  an async @DBOS.workflow taking the run's input and awaiting --steps async @DBOS.step()s, each returning its
        payload, recorded by DBOS (SQLAlchemy + psycopg) in its system tables.
Pass 1: round trips (each Query or Sync message a client sends) counted by a wire proxy, DBOS's idle background rate
subtracted; SQL statements by SQLAlchemy's before_cursor_execute on the threads that run workflows. Pass 2, direct:
--rounds rounds of --runs runs, ours then DBOS: this process's CPU (time.process_time, DBOS's threads included), the
PostgreSQL backends' CPU (/proc/<pid>/schedstat) and the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import asyncpg

try:
    from dbos import DBOS, DBOSConfig  # type: ignore[import-not-found, unused-ignore]
    from sqlalchemy import event  # type: ignore[import-not-found, unused-ignore]
    from sqlalchemy.engine import Engine  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    print("dbos is not installed (not a project dependency): uv run --with dbos python scripts/bench/durable_steps.py")
    sys.exit(0)

ROOT = Path(__file__).resolve().parents[2]
RUNS_DDL = """
CREATE TABLE agent_runs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(), session_id uuid NOT NULL, user_id uuid NOT NULL,
    status text NOT NULL DEFAULT 'running', run_input jsonb, resume_point jsonb, takeovers integer NOT NULL DEFAULT 0,
    CONSTRAINT ck_resume_point CHECK (resume_point IS NULL OR jsonb_typeof(resume_point) = 'object'))"""
START_SQL = "INSERT INTO agent_runs (session_id, user_id, run_input) SELECT gen_random_uuid(), $1, $2::jsonb"
START_SQL += " FROM generate_series(1, $3) RETURNING id"
RESUME_POINT_SQL = "UPDATE agent_runs SET resume_point = $3::jsonb WHERE id = $1 AND user_id = $2"
RESUME_POINT_SQL += " AND status = 'running'"
USER = uuid.uuid4()
POLLERS = ("dbos-background", "queue-", "Thread-")  # DBOS's background threads; workflows run on dbos-executor-N


class WireProxy(threading.Thread):
    """A proxy to PostgreSQL, on its own loop, that counts the Query ('Q') and Sync ('S') messages clients send:
    each is one round trip, answered by ReadyForQuery. Its clients must not ask for TLS or GSS encryption."""

    trips, port, ready = 0, 0, threading.Event()

    def run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 5432)

        async def down() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.create_task(down())
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            head = await reader.readexactly(4)  # the startup message has no type byte
            up_writer.write(head + await reader.readexactly(int.from_bytes(head) - 4))
            while True:
                kind, size = await reader.readexactly(1), await reader.readexactly(4)
                self.trips += kind in (b"Q", b"S")
                up_writer.write(kind + size + await reader.readexactly(int.from_bytes(size) - 4))
                await up_writer.drain()
        up_writer.close()
        await task


def db_url(name: str, port: int = 5432, libpq: bool = False) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{name}?sslmode=disable" + ("&gssencmode=disable" if libpq else "")


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes so far: the scheduler's nanoseconds in /proc/<pid>/schedstat."""
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return total / 1e9


def make_workflow(steps: int, payload: str) -> Callable[[str], Awaitable[int]]:
    async def answer(index: int, text: str) -> str:
        return f"{index}:{text}"

    step = DBOS.step(name="answer")(answer)

    async def turn(run_input: str) -> int:
        for index in range(steps):
            await step(index, payload)
        return steps

    workflow: Callable[[str], Awaitable[int]] = DBOS.workflow(name="turn")(turn)
    return workflow


def launch_dbos(url: str) -> None:
    DBOS(config=DBOSConfig(name="bench-durable-steps", system_database_url=url, log_level="WARNING"))
    DBOS.launch()


def added_packages() -> list[tuple[str, str, float]]:
    """The distributions here that uv.lock lacks, i.e. what `--with dbos` brought: name, version, MB installed."""
    locked = {p["name"] for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]}
    found = {(re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(), d) for d in metadata.distributions()}
    return sorted({(n, d.version, sum(f.size or 0 for f in d.files or []) / 1e6) for n, d in found if n not in locked})


async def main(args: argparse.Namespace) -> None:
    ours_db, dbos_db = (f"bench_durable_{uuid.uuid4().hex[:8]}_{arm}" for arm in ("ours", "dbos"))
    admin = await asyncpg.connect(db_url("postgres"))
    for name in (ours_db, dbos_db):
        await admin.execute(f'CREATE DATABASE "{name}"')
    payload, statements, proxy = "x" * args.payload, [0], WireProxy(daemon=True)
    run_input, workflow = json.dumps({"message": payload}), make_workflow(args.steps, payload)

    def count(*_: object) -> None:
        statements[0] += not threading.current_thread().name.startswith(POLLERS)

    event.listen(Engine, "before_cursor_execute", count)
    proxy.start()
    proxy.ready.wait()
    try:
        conn = await asyncpg.connect(db_url(ours_db))
        await conn.execute(RUNS_DDL)

        async def ours(connection: Any, n: int) -> None:
            for row in await conn.fetch(START_SQL, USER, run_input, n):  # the runs' start: not measured
                await connection.execute(
                    RESUME_POINT_SQL, row["id"], USER, json.dumps({"intent": 1, "request": payload})
                )

        async def dbos(n: int) -> None:
            for _ in range(n):
                await workflow(run_input)

        counted = await asyncpg.connect(db_url(ours_db, proxy.port))  # pass 1: round trips and statements
        await ours(counted, 5)  # asyncpg prepares the statement on its first execution
        before = proxy.trips
        await ours(counted, args.count_runs)
        ours_trips = (proxy.trips - before) / args.count_runs
        await counted.close()
        launch_dbos(db_url(dbos_db, proxy.port, libpq=True))
        await dbos(5)
        before, t0 = proxy.trips, time.perf_counter()
        await asyncio.sleep(args.idle)
        idle_rate = (proxy.trips - before) / (time.perf_counter() - t0)
        before, statements[0], t0 = proxy.trips, 0, time.perf_counter()
        await dbos(args.count_runs)
        dbos_trips = (proxy.trips - before - idle_rate * (time.perf_counter() - t0)) / args.count_runs
        DBOS.destroy()
        print(
            f"{args.steps} steps of {args.payload} B; per run ({args.count_runs} runs through the proxy): round trips"
        )
        print(
            f"ours {ours_trips:.2f}, DBOS {dbos_trips:.2f}; DBOS's SQL statements {statements[0] / args.count_runs:.2f}"
        )
        print(f"(DBOS's background threads when idle: {idle_rate:.1f} round trips/s, subtracted)")

        launch_dbos(db_url(dbos_db, libpq=True))  # pass 2, direct: CPU and wall per run
        await dbos(5)
        arms: dict[str, tuple[str, Callable[[], Awaitable[None]]]] = {
            "ours": (ours_db, lambda: ours(conn, args.runs)),
            "DBOS": (dbos_db, lambda: dbos(args.runs)),
        }
        per_run: dict[str, list[tuple[float, float, float]]] = {arm: [] for arm in arms}
        print(f"\nload average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
        print("| round | arm | runs | CPU ms / run (this process) | PostgreSQL CPU ms / run | wall ms / run |")
        print("|---|---|---|---|---|---|")
        for round_no in range(1, args.rounds + 1):
            for arm, (database, run) in arms.items():
                pids = [
                    r["pid"] for r in await admin.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", database)
                ]
                pg0, cpu0, wall0 = cpu_seconds(pids), time.process_time(), time.perf_counter()
                await run()
                wall, cpu, pg = time.perf_counter() - wall0, time.process_time() - cpu0, cpu_seconds(pids) - pg0
                per_run[arm].append((1000 * cpu / args.runs, 1000 * pg / args.runs, 1000 * wall / args.runs))
                print(f"| {round_no} | {arm} | {args.runs} | {' | '.join(f'{v:.3f}' for v in per_run[arm][-1])} |")
        print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        for index, what in enumerate(("process CPU", "PostgreSQL CPU", "wall")):
            ratios = [d[index] / o[index] for o, d in zip(per_run["ours"], per_run["DBOS"], strict=True)]
            listed = ", ".join(f"{r:.0f}x" for r in ratios)
            print(f"DBOS / ours, {what} per run, by round: {listed}; median {statistics.median(ratios):.0f}x")
        packages = added_packages()
        listed = ", ".join(f"{name} {version} ({size:.1f} MB)" for name, version, size in packages)
        print(f"\npackages DBOS adds to the project's environment: {listed}; {sum(p[2] for p in packages):.1f} MB")
        await conn.close()
    finally:
        DBOS.destroy()
        for name in (ours_db, dbos_db):
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs per arm and round")
    parser.add_argument("--steps", type=int, default=5, help="steps per run (DBOS; ours stores one resume point)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, ours then DBOS in each")
    parser.add_argument("--payload", type=int, default=300, help="bytes of each step's output and of the run input")
    parser.add_argument("--count-runs", type=int, default=100, help="runs of each arm through the counting proxy")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds of DBOS's idle background, measured apart")
    asyncio.run(main(parser.parse_args()))
