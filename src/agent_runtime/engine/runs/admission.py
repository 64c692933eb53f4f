"""Per-process admission: at most MAX_CONCURRENT_RUNS runs in flight, and none once the process drains.

Checked before anything touches the database, so a refusal costs microseconds. The per-user limit lives in the
database instead (trigger `enforce_user_run_limit`): it must hold across replicas.

Starts before work: while runs are being started (admitted, their start statement sent, RUN_STARTED or a refusal
on its way), admitted runs wait before they begin their turn, for at most `START_PRIORITY_SECONDS`. A burst of
requests then gets its first events before the runs it admitted take the event loop's turns and the database
pool's connections (measured: docs/benchmarks.md, "Load").

Every caller is a coroutine on the app's event loop, so the counters need no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from agent_runtime.engine.errors import ServerBusyError, ShuttingDownError
from agent_runtime.observability import metrics

# A refused client may retry soon: a run takes seconds, and a draining process's load balancer moves on.
_RETRY_AFTER_SECONDS = 1
# The longest an admitted run waits for the starts in progress: under a steady stream of starts the runs go on.
START_PRIORITY_SECONDS = 1.0


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.draining = False
        self._starting = 0
        self._no_start = asyncio.Event()
        self._no_start.set()

    @property
    def full(self) -> bool:
        return self.in_flight >= self.limit

    def check(self) -> None:
        """Raise the 503/429 a new run would get now, without taking a slot: the HTTP layer sheds with it
        before it authenticates or parses a run request (api/middleware.py)."""
        if self.draining:
            metrics.admission_refused(ShuttingDownError.code)
            raise ShuttingDownError("the server is shutting down; retry on another instance", retry_after=1)
        if self.full:
            metrics.admission_refused(ServerBusyError.code)
            raise ServerBusyError(
                f"this server runs as many runs as it may ({self.limit}); retry shortly",
                retry_after=_RETRY_AFTER_SECONDS,
            )

    def admit(self) -> None:
        """Take a run slot, or raise the 503/429 the client gets before any stream starts."""
        self.check()
        self.in_flight += 1
        metrics.runs_in_flight(self.in_flight)

    def take(self) -> None:
        """Take a slot for a run taken over from a dead process (engine/runs/takeover/): it was claimed for the room
        this process had, and runs even if requests filled that room since."""
        self.in_flight += 1
        metrics.runs_in_flight(self.in_flight)

    def release(self) -> None:
        self.in_flight -= 1
        metrics.runs_in_flight(self.in_flight)

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Around a run's start, until its first event (or its refusal) is on its way."""
        self._starting += 1
        self._no_start.clear()
        try:
            yield
        finally:
            self._starting -= 1
            if not self._starting:
                self._no_start.set()

    async def after_starts(self) -> None:
        """Until no run is being started, at most START_PRIORITY_SECONDS."""
        if self._starting:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(START_PRIORITY_SECONDS):
                    await self._no_start.wait()
