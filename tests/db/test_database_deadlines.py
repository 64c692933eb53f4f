"""The pool's deadlines (DATABASE_*_TIMEOUT_SECONDS): a server that accepts connections and never answers, and a
statement that does not finish, cost a bounded wait and end in `DatabaseUnavailableError` (503), not a hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from agent_runtime.db.pool import create_pool
from agent_runtime.engine.errors import DatabaseUnavailableError
from agent_runtime.settings import DatabaseDeadlines


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """A TCP server that accepts and then says nothing, as a host behind a dropped route or a hung PostgreSQL."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def _seconds_to_refusal(
    dsn: str, deadlines: DatabaseDeadlines, statement: str = "SELECT 1", *, acquired: bool = False
) -> float:
    """How long `statement` takes to fail, run by the pool (`pool.fetchval`) or on a connection acquired from it."""
    pool = await create_pool(dsn, min_size=0, max_size=2, deadlines=deadlines)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError) as refused:
            async with asyncio.timeout(20):
                if acquired:
                    async with pool.acquire() as conn:
                        await conn.fetchval(statement)
                else:
                    await pool.fetchval(statement)
        assert refused.value.status_code == 503 and refused.value.code == "database_unavailable"
        return time.monotonic() - started
    finally:
        pool.terminate()


@pytest.mark.parametrize("acquired", [False, True], ids=["pool", "acquired"])
async def test_the_acquire_deadline_bounds_a_connect_that_gets_no_answer(silent_server: str, acquired: bool) -> None:
    deadlines = DatabaseDeadlines(connect_seconds=10, acquire_seconds=0.5, statement_seconds=10)
    assert 0.4 < await _seconds_to_refusal(silent_server, deadlines, acquired=acquired) < 1.5


async def test_the_connect_deadline_bounds_one_connect(silent_server: str) -> None:
    deadlines = DatabaseDeadlines(connect_seconds=0.5, acquire_seconds=10, statement_seconds=10)
    assert 0.4 < await _seconds_to_refusal(silent_server, deadlines) < 1.5


@pytest.mark.parametrize("acquired", [False, True], ids=["pool", "acquired"])
async def test_the_statement_deadline_bounds_a_statement_that_never_ends(database_url: str, acquired: bool) -> None:
    deadlines = DatabaseDeadlines(connect_seconds=5, acquire_seconds=5, statement_seconds=0.5)
    assert 0.4 < await _seconds_to_refusal(database_url, deadlines, "SELECT pg_sleep(10)", acquired=acquired) < 1.5


@pytest.mark.parametrize("acquired", [False, True], ids=["pool", "acquired"])
async def test_a_busy_pool_is_waited_for_past_the_acquire_deadline_within_the_statement_deadline(
    database_url: str, acquired: bool
) -> None:
    # Every connection open and in use is load, not an outage: the queue drains as statements end.
    deadlines = DatabaseDeadlines(connect_seconds=5, acquire_seconds=0.2, statement_seconds=3)
    pool = await create_pool(database_url, min_size=2, max_size=2, deadlines=deadlines)
    try:
        busy = [asyncio.create_task(pool.fetchval("SELECT pg_sleep(0.8)")) for _ in range(2)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        if acquired:
            async with pool.acquire() as conn:
                answer = await conn.fetchval("SELECT 1")
        else:
            answer = await pool.fetchval("SELECT 1")
        assert answer == 1 and 0.4 < time.monotonic() - started < 2.5
        await asyncio.gather(*busy)
        # A pool whose connections are not given back within the statement deadline is refused then.
        release = asyncio.Event()

        async def hold() -> None:
            async with pool.acquire():
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError):
            await pool.fetchval("SELECT 1")
        assert 2.5 < time.monotonic() - started < 4.5
        release.set()
        await asyncio.gather(*holders)
    finally:
        pool.terminate()
