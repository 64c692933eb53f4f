"""A small SQL migration runner, safe when several replicas start at the same moment.

Each `migrations/NNNN_name.sql` file is applied in its own transaction that first takes
`LOCK TABLE schema_migrations IN EXCLUSIVE MODE`, re-checks whether the file is already recorded,
and only then runs it: concurrent runners queue on the table lock instead of using advisory locks,
and a runner that dies releases the lock with its connection.

The bootstrap `CREATE TABLE IF NOT EXISTS schema_migrations` is not race-free in PostgreSQL (two
sessions may both pass the existence check and one then fails on the catalog's unique index), so it
is retried when it loses that race.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from pydantic import BaseModel

from agent_runtime.resources import default_migrations_dir

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_BOOTSTRAP = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
# Whether the server offers pgvector's extension (migrations/0011_user_memories.sql creates it), and its major
# version, for the package name of the hint when it does not (preflight.py).
PGVECTOR_AVAILABLE_SQL = """
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS available,
       current_setting('server_version_num')::int / 10000 AS major
"""
_BOOTSTRAP_RACE_ERRORS = (asyncpg.UniqueViolationError, asyncpg.DuplicateTableError, asyncpg.DuplicateObjectError)


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


class MigrationReport(BaseModel):
    applied: list[str]
    already_applied: list[str]


class MigrationError(RuntimeError):
    pass


def discover(directory: Path | None = None) -> list[Migration]:
    directory = directory or default_migrations_dir()
    migrations = []
    for path in sorted(directory.glob("*.sql")):
        if not _NAME.match(path.name):
            raise MigrationError(f"{path}: migration files must be named NNNN_lower_snake.sql")
        migrations.append(Migration(version=path.stem, path=path, sql=path.read_text(encoding="utf-8")))
    versions = [m.version[:4] for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"{directory}: two migrations share a number")
    return migrations


async def _bootstrap(conn: asyncpg.Connection) -> None:
    for attempt in range(5):
        try:
            await conn.execute(_BOOTSTRAP)
            return
        except _BOOTSTRAP_RACE_ERRORS:
            # Another runner created the table between our existence check and our insert into
            # the catalog; it exists now, which is all we need.
            log.debug("schema_migrations bootstrap lost a creation race (attempt %d)", attempt + 1)
    await conn.execute(_BOOTSTRAP)


async def apply_migrations(dsn: str, directory: Path | None = None) -> MigrationReport:
    migrations = discover(directory)
    conn = await asyncpg.connect(dsn)
    try:
        await _bootstrap(conn)
        applied: list[str] = []
        skipped: list[str] = []
        for migration in migrations:
            async with conn.transaction():
                await conn.execute("LOCK TABLE schema_migrations IN EXCLUSIVE MODE")
                recorded = await conn.fetchval(
                    "SELECT checksum FROM schema_migrations WHERE version = $1", migration.version
                )
                if recorded is not None:
                    if recorded != migration.checksum:
                        raise MigrationError(
                            f"{migration.path.name} changed after it was applied (checksum mismatch); "
                            "add a new migration instead of editing an applied one"
                        )
                    skipped.append(migration.version)
                    continue
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)",
                    migration.version,
                    migration.checksum,
                )
                applied.append(migration.version)
                log.debug("applied migration %s", migration.version)
        return MigrationReport(applied=applied, already_applied=skipped)
    finally:
        await conn.close()
