"""A real PostgreSQL for the tests: a fresh database per test session, dropped at the end.

TEST_DATABASE_URL if set, else the server on 127.0.0.1:5432 (user postgres), else an embedded one.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from agent_runtime.db.embedded import EmbeddedPostgres

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class PgServer:
    admin_url: str
    embedded: EmbeddedPostgres | None

    def url_for(self, database: str) -> str:
        base, _, query = self.admin_url.partition("?")
        root = base.rsplit("/", 1)[0]
        return f"{root}/{database}" + (f"?{query}" if query else "")


async def _answers(url: str) -> bool:
    try:
        conn = await asyncpg.connect(url, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


async def find_server() -> PgServer:
    explicit = os.environ.get("TEST_DATABASE_URL")
    if explicit:
        return PgServer(admin_url=explicit, embedded=None)
    if await _answers(LOCAL_SERVER):
        return PgServer(admin_url=LOCAL_SERVER, embedded=None)
    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="agent-runtime-test-pg-")))
    return PgServer(admin_url=embedded.start(), embedded=embedded)


async def create_database(server: PgServer, prefix: str = "agent_runtime_test") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server.admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name


async def drop_database(server: PgServer, name: str) -> None:
    conn = await asyncpg.connect(server.admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
