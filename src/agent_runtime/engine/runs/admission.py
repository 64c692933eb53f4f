"""Per-process admission: at most MAX_CONCURRENT_RUNS runs in flight, and none once the process drains.

Checked before anything touches the database, so a refusal costs microseconds and no stream ever starts
for a run that cannot get a thread (`engine/flow/crewai/threads.py` sizes its pools from the same setting). The
per-user limit lives in the database instead (trigger `enforce_user_run_limit`): it must hold across replicas.

Every caller is a coroutine on the app's event loop, so the counter needs no lock.
"""

from __future__ import annotations

from agent_runtime.engine.errors import ServerBusyError, ShuttingDownError
from agent_runtime.observability import metrics

# A refused client may retry soon: a run takes seconds, and a draining process's load balancer moves on.
_RETRY_AFTER_SECONDS = 1


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.draining = False

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

    def release(self) -> None:
        self.in_flight -= 1
        metrics.runs_in_flight(self.in_flight)
