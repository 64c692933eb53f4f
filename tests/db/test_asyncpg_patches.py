"""Pins the reaches into asyncpg's internals listed in src/agent_runtime/db/PATCHES.md, by reading asyncpg's code."""

from __future__ import annotations

import asyncio
import inspect

import asyncpg
from asyncpg.pool import PoolAcquireContext


def test_create_pool_only_builds_a_pool_with_these_defaults() -> None:
    source = inspect.getsource(asyncpg.pool.create_pool)
    assert "return Pool(" in source
    defaults = {
        name: p.default
        for name, p in inspect.signature(asyncpg.create_pool).parameters.items()
        if p.default is not p.empty
    }
    assert {k: defaults[k] for k in ("max_queries", "max_inactive_connection_lifetime")} == {
        "max_queries": 50000,
        "max_inactive_connection_lifetime": 300.0,
    }
    assert (defaults["connection_class"], defaults["record_class"]) == (asyncpg.Connection, asyncpg.Record)


def test_pool_acquire_builds_an_acquire_context_of_the_pool_and_a_timeout() -> None:
    assert list(inspect.signature(PoolAcquireContext.__init__).parameters) == ["self", "pool", "timeout"]
    assert "return PoolAcquireContext(self, timeout)" in inspect.getsource(asyncpg.Pool.acquire)


def test_pool_waiters_are_the_getters_of_its_asyncio_queue() -> None:
    assert "self._queue = _PoolConnectionHolderQueue(" in inspect.getsource(asyncpg.Pool)
    assert issubclass(asyncpg.pool._PoolConnectionHolderQueue, asyncio.Queue)
    assert "await self._queue.get()" in inspect.getsource(asyncpg.Pool._acquire)
    # asyncio.Queue.get parks each waiting get() on a future in `_getters` until an item is put back.
    assert "self._getters.append(getter)" in inspect.getsource(asyncio.Queue.get)
