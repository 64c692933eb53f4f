from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest
from tests.support.database import PgServer, create_database, drop_database

from agent_runtime.db.migrations import _BOOTSTRAP as BOOTSTRAP_SQL
from agent_runtime.db.migrations import MigrationError, apply_migrations, discover

PROCESSES = 8


async def _spawn_migrators(url: str) -> list[asyncio.subprocess.Process]:
    """`agent-runtime migrate` in PROCESSES child processes, all against `url`."""
    env = {**os.environ, "DATABASE_URL": url}
    return [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent_runtime.cli",
            "migrate",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]


async def _until_all_wait_for(barrier: asyncpg.Connection, url: str) -> None:
    """Until every migrator's connection is blocked by the barrier's transaction: then they are all at the
    same statement, and releasing the barrier lets them go at the same moment. (Watched from another
    connection: inside a transaction pg_stat_activity is a snapshot that would never show them.)"""
    watcher = await asyncpg.connect(url)
    try:
        async with asyncio.timeout(60):
            while True:
                waiting = await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))",
                    barrier.get_server_pid(),
                )
                if waiting == PROCESSES:
                    return
                await asyncio.sleep(0.01)
    finally:
        await watcher.close()


async def _outcome(url: str, procs: list[asyncio.subprocess.Process]) -> list[str]:
    """Every process exited 0; returns each one's `applied: ...` part of its report line."""
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), timeout=60)
    assert [p.returncode for p in procs] == [0] * PROCESSES, [err.decode()[-600:] for _, err in outputs]
    conn = await asyncpg.connect(url)
    try:
        recorded = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")]
    finally:
        await conn.close()
    assert recorded == [m.version for m in discover()]
    return [out.decode().split(";")[0] for out, _ in outputs]


async def test_processes_racing_the_bootstrap_all_start(pg_server: PgServer) -> None:
    """The barrier is a transaction that has created schema_migrations and not committed: every migrator's
    `CREATE TABLE IF NOT EXISTS` finds no table and then waits on that uncommitted catalog row. The commit
    releases them all at once into the unique violation of the bootstrap race, which they must absorb.
    Run against the runner without the retry (`range(5)` -> `range(0)`), 10 times: all 8 processes failed
    with UniqueViolationError (pg_type_typname_nsp_index) every time."""
    name = await create_database(pg_server, prefix="agent_runtime_migrate")
    url = pg_server.url_for(name)
    try:
        barrier = await asyncpg.connect(url)
        try:
            async with barrier.transaction():
                await barrier.execute(BOOTSTRAP_SQL)
                procs = await _spawn_migrators(url)
                await _until_all_wait_for(barrier, url)
        finally:
            await barrier.close()
        applied = await _outcome(url, procs)
        for version in [m.version for m in discover()]:
            assert sum(version in line for line in applied) == 1, applied
    finally:
        await drop_database(pg_server, name)


# The first migration (the whole schema) and the newest one: every migration goes through the same runner
# code, and each race costs 8 processes.
RACED = sorted({discover()[0].version, discover()[-1].version})


@pytest.mark.parametrize("version", RACED)
async def test_processes_racing_a_migration_apply_it_once(pg_server: PgServer, tmp_path: Path, version: str) -> None:
    """The migrations before `version` are applied; the barrier is a transaction holding schema_migrations in
    ACCESS EXCLUSIVE mode, so every migrator waits at its first statement on the table, with or without
    the runner's own lock. The commit releases them all at once into `version`. Each migration must be
    applied by exactly one process and every process must succeed.
    Run against the runner without `LOCK TABLE schema_migrations IN EXCLUSIVE MODE`, 10 times per migration:
    every run failed, with 7 of the 8 processes failing on 0001 every time, 4 to 7 on 0002 and 2 to 7 on 0007
    (UniqueViolationError on pg_class / pg_type: they ran the migration at once)."""
    name = await create_database(pg_server, prefix="agent_runtime_migrate")
    url = pg_server.url_for(name)
    try:
        earlier = [m for m in discover() if m.version < version]
        for migration in earlier:
            (tmp_path / migration.path.name).write_text(migration.sql, encoding="utf-8")
        await apply_migrations(url, tmp_path)  # also creates schema_migrations when nothing is earlier
        barrier = await asyncpg.connect(url)
        try:
            async with barrier.transaction():
                await barrier.execute("LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE")
                procs = await _spawn_migrators(url)
                await _until_all_wait_for(barrier, url)
        finally:
            await barrier.close()
        applied = await _outcome(url, procs)
        for migration in discover():
            expected = 0 if migration in earlier else 1
            assert sum(migration.version in line for line in applied) == expected, applied
    finally:
        await drop_database(pg_server, name)


async def test_rerun_is_noop_and_edited_migration_is_refused(pg_server: PgServer, tmp_path: Path) -> None:
    name = await create_database(pg_server, prefix="agent_runtime_migrate")
    url = pg_server.url_for(name)
    try:
        (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (id int);")
        first = await apply_migrations(url, tmp_path)
        assert (first.applied, first.already_applied) == (["0001_a"], [])
        second = await apply_migrations(url, tmp_path)
        assert (second.applied, second.already_applied) == ([], ["0001_a"])
        (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (id bigint);")
        with pytest.raises(MigrationError, match="checksum mismatch"):
            await apply_migrations(url, tmp_path)
    finally:
        await drop_database(pg_server, name)


async def test_failed_migration_rolls_back_alone(pg_server: PgServer, tmp_path: Path) -> None:
    name = await create_database(pg_server, prefix="agent_runtime_migrate")
    url = pg_server.url_for(name)
    try:
        (tmp_path / "0001_ok.sql").write_text("CREATE TABLE ok (id int);")
        (tmp_path / "0002_bad.sql").write_text("CREATE TABLE half (id int); SELECT broken syntax here;")
        with pytest.raises(asyncpg.PostgresSyntaxError):
            await apply_migrations(url, tmp_path)
        conn = await asyncpg.connect(url)
        try:
            assert [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")] == ["0001_ok"]
            assert await conn.fetchval("SELECT to_regclass('half')") is None
        finally:
            await conn.close()
    finally:
        await drop_database(pg_server, name)


def test_bad_file_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "add_things.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_lower_snake"):
        discover(tmp_path)
