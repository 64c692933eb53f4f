"""Checks `serve` and `migrate` make before anything starts, and one-line explanations of start-up failures.

A newcomer's typo in DATABASE_URL used to end in a traceback with the cause on its last line and no word
of which setting was wrong; a port already in use was reported only after PostgreSQL had started and the
migrations had run. Each failure here becomes `StartupError`, whose message names the setting and the cause.
"""

from __future__ import annotations

import errno
import socket

import asyncpg

from agent_runtime.db.migrations import PGVECTOR_AVAILABLE_SQL

CONNECT_TIMEOUT_SECONDS = 10.0


class StartupError(Exception):
    """A start-up failure one line explains: `SETTING: cause`."""


def check_port_free(host: str, port: int, setting: str) -> None:
    """Fail fast when nothing could listen on host:port (the server binds it later, after start-up)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"HOST: cannot resolve {host!r}: {exc.strerror}") from exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As uvicorn binds: with SO_REUSEADDR, a port in TIME_WAIT after a restart is not "in use".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"{setting}: port {port} on {host} is already in use (another agent-runtime?); "
                    f"choose another with --port or {setting}"
                ) from exc
            raise StartupError(f"{setting}: cannot listen on {host}:{port}: {exc.strerror}") from exc


def describe_database_error(exc: BaseException) -> str | None:
    """`DATABASE_URL: cause` for the ways connecting to a configured server fails; None for anything else."""
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"DATABASE_URL: {exc}"
    if isinstance(exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError):
        return f"DATABASE_URL: the server refused the credentials: {exc}"
    if isinstance(exc, asyncpg.ClientConfigurationError | ValueError | OverflowError):
        return f"DATABASE_URL: malformed: {exc}"
    if isinstance(exc, socket.gaierror):
        return f"DATABASE_URL: unknown host: {exc.strerror}"
    if isinstance(exc, TimeoutError):
        return f"DATABASE_URL: no answer from the server within {CONNECT_TIMEOUT_SECONDS:g} s"
    if isinstance(exc, OSError):
        return f"DATABASE_URL: cannot connect: {exc.strerror or exc}"
    if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
        return f"DATABASE_URL: {type(exc).__name__}: {exc}"
    return None


async def check_database(dsn: str) -> None:
    """Connect once to a configured server (not the embedded one, which ships pgvector), check that it offers
    pgvector, and hang up."""
    try:
        conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_SECONDS)
    except Exception as exc:
        message = describe_database_error(exc)
        if message is None:
            raise
        raise StartupError(message) from exc
    try:
        row = await conn.fetchrow(PGVECTOR_AVAILABLE_SQL)
    finally:
        await conn.close()
    assert row is not None
    if not row["available"]:
        raise StartupError(
            "DATABASE_URL: the server lacks the pgvector extension (`vector`, for long-term memories): install "
            f"it on the database server (Debian/Ubuntu: apt-get install postgresql-{row['major']}-pgvector; "
            "Docker: the pgvector/pgvector image; else https://github.com/pgvector/pgvector#installation), "
            "or leave DATABASE_URL unset for the embedded PostgreSQL, which has it"
        )
