"""The asyncpg pool: one per process, owned by the app lifespan; JSON codecs registered here."""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg

from agent_runtime.db.outage import ResilientPool
from agent_runtime.observability.tracing import trace_queries
from agent_runtime.settings import DatabaseDeadlines, Settings, UserQuotas

# The characters `engine.text` refuses from clients (the db layer sits below the engine, so not imported).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable_json(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_storable_json(k): _storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable_json(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    """JSON for json/jsonb parameters. jsonb refuses NUL (U+0000) and lone surrogates, which model output may
    hold (client text is refused before it gets here): such characters are stored as U+FFFD instead of
    failing the statement. `json.dumps` escapes both as `\\u....`, so the walk only runs when one may be there
    (a `\\ud...` is also how an emoji's valid surrogate pair is escaped: the walk then changes nothing)."""
    text = json.dumps(value)
    return json.dumps(_storable_json(value)) if "\\u0000" in text or "\\ud" in text else text


async def _register_codecs(conn: asyncpg.Connection) -> None:
    # Registered on the pool so no query decodes JSON by hand.
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(typename, encoder=_dumps, decoder=json.loads, schema="pg_catalog")
    trace_queries(conn)


async def _keep_session_state(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: nothing beyond asyncpg's own rollback of an unfinished transaction.

    asyncpg's default (`SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`) was half of a
    run's statements. Nothing here leaves such state behind: no advisory locks (a house rule),
    no cursors outside a transaction, LISTEN only on dedicated connections, and the one session setting we
    use (`agent_runtime.*`, the per-user limits) must survive: RESET ALL would erase them.
    """


# The defaults of Settings (DATABASE_*_TIMEOUT_SECONDS), for pools made without settings (tests, benchmarks).
DEFAULT_DEADLINES = DatabaseDeadlines(
    **{
        f"{name}_seconds": Settings.model_fields[f"database_{name}_timeout_seconds"].default
        for name in ("connect", "acquire", "statement")
    }
)


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    quotas: UserQuotas | None = None,
    deadlines: DatabaseDeadlines = DEFAULT_DEADLINES,
) -> asyncpg.Pool:
    """`quotas` are the per-user limits the database's triggers read (migrations/0003, 0007), set once per
    connection as `agent_runtime.<name>` session settings; None or an unset limit: none. `deadlines` bound the
    connect, the wait for a connection and each statement (db/outage.py)."""
    limits = {name: str(value) for name, value in (quotas or UserQuotas()).model_dump().items() if value is not None}

    async def init(conn: asyncpg.Connection) -> None:
        await _register_codecs(conn)
        for name, value in limits.items():
            await conn.execute("SELECT set_config($1, $2, false)", f"agent_runtime.{name}", value)

    # asyncpg.create_pool's own arguments, with our pool class (create_pool takes none).
    pool = ResilientPool(
        dsn,
        acquire_timeout=deadlines.acquire_seconds,
        busy_timeout=deadlines.statement_seconds,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        min_size=min_size,
        max_size=max_size,
        max_queries=50_000,
        max_inactive_connection_lifetime=300.0,
        loop=None,
        init=init,
        reset=_keep_session_state,
        command_timeout=deadlines.statement_seconds,
        timeout=deadlines.connect_seconds,
    )
    await pool
    return pool


async def ping(pool: asyncpg.Pool, *, within_seconds: float) -> bool:
    """Whether the database answers in time; raises what asyncpg raises when it cannot (TimeoutError too)."""
    answer: int | None = await pool.fetchval("SELECT 1", timeout=within_seconds)
    return answer == 1
