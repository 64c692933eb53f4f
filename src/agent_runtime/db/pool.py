"""The asyncpg pool: one per process, owned by the app lifespan; JSON codecs registered here."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from agent_runtime.observability.tracing import trace_queries


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    """JSON for json/jsonb parameters. jsonb refuses NUL (U+0000), which model output or a client's free-form
    settings may hold: such strings are stored with U+FFFD instead of failing the statement."""
    text = json.dumps(value)
    return json.dumps(_without_nul(value)) if "\\u0000" in text else text


async def _init_connection(conn: asyncpg.Connection) -> None:
    # Registered on the pool so no query decodes JSON by hand.
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(typename, encoder=_dumps, decoder=json.loads, schema="pg_catalog")
    trace_queries(conn)


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection, command_timeout=60
    )
    assert pool is not None
    return pool
