"""The background sampler: event-loop lag, the database pool's state and the GC's pauses, twice a second.

Lag is how late a timer fires: while a callback hogs the loop (CPU on the loop thread, a blocking call),
every request and database call waits that long too. Pool state is read at sampling time rather than on
every acquire, because the acquires belong to code that does not know about metrics.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from agent_runtime.observability import metrics
from agent_runtime.observability.gc_pauses import GcPauses

SAMPLE_INTERVAL_SECONDS = 0.5


def waiting_acquires(pool: asyncpg.Pool) -> int:
    """Acquires queued for a connection. asyncpg has no public count: its pool hands connections out through
    an asyncio.Queue, whose pending `get()` futures are the waiters (db/PATCHES.md, row 3)."""
    queue: Any = getattr(pool, "_queue", None)
    getters = getattr(queue, "_getters", None) or ()
    return sum(not waiter.done() for waiter in getters)


def sample_pool(pool: asyncpg.Pool) -> None:
    size, idle = pool.get_size(), pool.get_idle_size()
    metrics.db_pool(in_use=size - idle, idle=idle, max_size=pool.get_max_size(), waiting=waiting_acquires(pool))


async def sample_forever(
    pool: asyncpg.Pool, interval: float = SAMPLE_INTERVAL_SECONDS, gc_pauses: GcPauses | None = None
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(interval)
        metrics.event_loop_lag(max(0.0, loop.time() - before - interval))
        sample_pool(pool)
        if gc_pauses is not None:
            gc_pauses.drain()
