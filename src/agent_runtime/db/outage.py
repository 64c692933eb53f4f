"""The pool while PostgreSQL is away: every wait has a deadline, every lost connection is one error
(`DatabaseUnavailableError`, a 503 `database_unavailable` with Retry-After), and statements are sent a second time,
on a fresh connection, only when that cannot apply them twice: a statement that never left, or a read (`read`).

What counts as the database being away is decided here and nowhere else (`is_unavailable`): the HTTP layer's
last-resort handler and the run engine ask the same question.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolAcquireContext

from agent_runtime.engine.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

# The server went away, refused us, or is not taking connections: asyncpg's own words for it.
_SERVER_AWAY: tuple[type[BaseException], ...] = (
    # 08xxx: ConnectionDoesNotExistError ("closed in the middle of operation"), ConnectionFailureError, ...
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,  # 57P01: pg_terminate_backend, a fast or immediate shutdown
    asyncpg.exceptions.CrashShutdownError,  # 57P02: another backend crashed
    asyncpg.exceptions.CannotConnectNowError,  # 57P03: starting up, shutting down, in recovery
    asyncpg.exceptions.TooManyConnectionsError,  # 53300: no connection to be had
)
# From a database call, an OSError is the network: refused, reset, unreachable; TimeoutError (the connect, acquire
# and statement deadlines) is one too. From anything else it may be anything, so only `outage_behind` is asked then.
_UNAVAILABLE: tuple[type[BaseException], ...] = (OSError, *_SERVER_AWAY)

# The statement may have reached the server before the connection died: only a read may be sent again.
_LOST_MID_STATEMENT: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    ConnectionResetError,
    BrokenPipeError,
)


def _never_sent(exc: BaseException) -> bool:
    # asyncpg checks the connection before it sends anything: this statement never reached the server.
    return isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc)


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc`, raised by a database call, says the database is away rather than that the statement failed."""
    return isinstance(exc, (DatabaseUnavailableError, *_UNAVAILABLE)) or _never_sent(exc)


def outage_behind(exc: BaseException) -> bool:
    """Whether an error of any origin was caused by the database being away (a library may have wrapped it): the
    question for last-resort handlers, where an OSError or a TimeoutError need not be the database's."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (DatabaseUnavailableError, *_SERVER_AWAY)) or _never_sent(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class _Acquire(PoolAcquireContext):  # type: ignore[misc]
    """`async with pool.acquire() as conn:` with the outage errors of the block and of the acquisition translated."""

    __slots__ = ()

    async def __aenter__(self) -> Any:
        try:
            return await super().__aenter__()
        except Exception as exc:
            if is_unavailable(exc):
                raise DatabaseUnavailableError() from exc
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await super().__aexit__(exc_type, exc, tb)
        if isinstance(exc, Exception) and not isinstance(exc, DatabaseUnavailableError) and is_unavailable(exc):
            raise DatabaseUnavailableError() from exc


class ResilientPool(asyncpg.Pool):  # type: ignore[misc]
    """asyncpg's pool with a default deadline on every acquisition and the outage translated; the per-connection
    `command_timeout` bounds each statement.

    The acquisition's deadline tells an outage from load. `acquire_timeout` (which also bounds the connect an
    acquisition may make) applies while the pool has a connection to open or an idle one: a wait past it means the
    database does not answer. When every connection is open and in use, the wait is the queue of a busy process,
    which drains as statements end (each within `command_timeout`): it may last `busy_timeout`, so that a burst of
    runs is slowed down rather than failed as `database_unavailable` (measured: 200 runs at once on one core,
    docs/benchmarks.md "Load")."""

    def __init__(self, *args: Any, acquire_timeout: float, busy_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._acquire_timeout = acquire_timeout
        self._busy_timeout = max(busy_timeout, acquire_timeout)

    def _deadline(self) -> float:
        busy = self.get_size() >= self.get_max_size() and self.get_idle_size() == 0
        return self._busy_timeout if busy else self._acquire_timeout

    def acquire(self, *, timeout: float | None = None) -> Any:
        return _Acquire(self, self._deadline() if timeout is None else timeout)

    async def read(self, run: Callable[[Any], Awaitable[T]]) -> T:
        """`run(conn)` for statements that only read (no `pg_notify`, no data-modifying CTE, no volatile function):
        when the connection dies under it, it runs once more on a fresh connection, which cannot apply anything
        twice. A killed pooled connection (pg_terminate_backend, a restarted server) is then no error at all."""
        return await self._run(run, resend=True)

    async def _run(self, run: Callable[[Any], Awaitable[T]], *, resend: bool) -> T:
        retried = False
        while True:
            try:
                async with PoolAcquireContext(self, self._deadline()) as conn:
                    return await run(conn)
            except Exception as exc:
                if not is_unavailable(exc):
                    raise
                # A write is sent again only when it never left: it may have been applied before the connection died.
                if not retried and (_never_sent(exc) or (resend and isinstance(exc, _LOST_MID_STATEMENT))):
                    # The pool replaces the dead connection on the next acquisition.
                    retried = True
                    log.warning("database connection lost; trying once more on a fresh one", exc_info=True)
                    continue
                raise DatabaseUnavailableError() from exc

    # asyncpg's signatures, `timeout` included (ASYNC109 would have it be asyncio.timeout).
    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return await self._run(lambda conn: conn.execute(query, *args, timeout=timeout), resend=False)

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return await self._run(lambda conn: conn.executemany(command, args, timeout=timeout), resend=False)

    async def fetch(
        self,
        query: str,
        *args: Any,
        timeout: float | None = None,  # noqa: ASYNC109
        record_class: Any = None,
    ) -> Any:
        return await self._run(
            lambda conn: conn.fetch(query, *args, timeout=timeout, record_class=record_class), resend=False
        )

    async def fetchval(
        self,
        query: str,
        *args: Any,
        column: int = 0,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        return await self._run(lambda conn: conn.fetchval(query, *args, column=column, timeout=timeout), resend=False)

    async def fetchrow(
        self,
        query: str,
        *args: Any,
        timeout: float | None = None,  # noqa: ASYNC109
        record_class: Any = None,
    ) -> Any:
        return await self._run(
            lambda conn: conn.fetchrow(query, *args, timeout=timeout, record_class=record_class), resend=False
        )
