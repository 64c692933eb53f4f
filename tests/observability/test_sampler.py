"""The sampler's view of the database pool, including asyncpg's private waiter queue (pinned here)."""

from __future__ import annotations

import asyncio

import asyncpg
from prometheus_client import REGISTRY

from agent_runtime.db.pool import create_pool
from agent_runtime.observability.sampler import sample_forever, sample_pool, waiting_acquires


def _gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def test_pool_in_use_and_waiting(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)

    async def take() -> asyncpg.Connection:
        return await pool.acquire()

    conn = await take()
    waiter = asyncio.create_task(take())
    try:
        for _ in range(1000):  # the waiter queues within its first few steps
            if waiting_acquires(pool):
                break
            await asyncio.sleep(0)
        sample_pool(pool)
        assert _gauge("agent_runtime_db_pool_connections", state="in_use") == 1
        assert _gauge("agent_runtime_db_pool_connections", state="idle") == 0
        assert _gauge("agent_runtime_db_pool_waiting_requests") == 1
        assert _gauge("agent_runtime_db_pool_max_connections") == 1

        await pool.release(conn)
        await pool.release(await waiter)
        sample_pool(pool)
        assert _gauge("agent_runtime_db_pool_waiting_requests") == 0
        assert _gauge("agent_runtime_db_pool_connections", state="in_use") == 0
    finally:
        pool.terminate()


async def test_event_loop_lag_is_sampled(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=0, max_size=1)
    before = _gauge("agent_runtime_event_loop_lag_seconds_count") or 0
    sampler = asyncio.create_task(sample_forever(pool, interval=0.01))
    try:
        for _ in range(1000):  # three samples take ~30 ms; polled, with a bound instead of a hang
            if (_gauge("agent_runtime_event_loop_lag_seconds_count") or 0) >= before + 3:
                break
            await asyncio.sleep(0.01)
        assert (_gauge("agent_runtime_event_loop_lag_seconds_count") or 0) >= before + 3
    finally:
        sampler.cancel()
        await pool.close()
