from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest
from tests.support.database import PgServer, create_database, drop_database

from agent_runtime.db.migrations import MigrationError, apply_migrations, discover


async def test_eight_processes_migrate_one_fresh_database(pg_server: PgServer) -> None:
    name = await create_database(pg_server, prefix="agent_runtime_migrate")
    url = pg_server.url_for(name)
    try:
        env = {**os.environ, "DATABASE_URL": url}
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent_runtime.cli",
                "migrate",
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for _ in range(8)
        ]
        outputs = await asyncio.gather(*(p.communicate() for p in procs))
        codes = [p.returncode for p in procs]
        assert codes == [0] * 8, [o[1].decode()[-500:] for o in outputs]
        applied_lines = [o[0].decode() for o in outputs]
        versions = [m.version for m in discover()]
        # Each migration applied by exactly one of the processes.
        for version in versions:
            assert sum(version in line.split(";")[0] for line in applied_lines) == 1, applied_lines
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        finally:
            await conn.close()
        assert [r["version"] for r in rows] == versions
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
