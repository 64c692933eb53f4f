"""How a run ends: the failure it reports, and the write that records its end whatever happens meanwhile."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Literal

import asyncpg
from pydantic import JsonValue

from agent_runtime.db.outage import is_unavailable, outage_behind
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import AppError, DatabaseUnavailableError
from agent_runtime.engine.runs.ledger.store import RunEnd, RunEndRequest, RunStore, StartedRun

log = logging.getLogger(__name__)

# Errors of a database that is up but refused this attempt: worth another try until the lease runs out.
_TRANSIENT_DB_ERRORS = (
    asyncpg.exceptions.OperatorInterventionError,  # e.g. 57014, a cancelled statement
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
)
# A database that is away (db/outage.py) is retried only briefly: long enough for the pool to replace a killed
# connection, short enough that the run's client hears `database_unavailable` now, not when it comes back (the
# sweep records the run as lost meanwhile).
UNAVAILABLE_RETRY_SECONDS = 1.0
_FIRST_RETRY_SECONDS = 0.05
_MAX_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class RunFailure:
    """What a failed run's RUN_ERROR says (`code`, `message`); the same code is stored on the run row."""

    code: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> RunFailure:
        if outage_behind(exc):
            # Also when a library wrapped it (a tool's or a model call's recording inside CrewAI).
            return DATABASE_UNAVAILABLE
        if isinstance(exc, AppError):
            return cls(exc.code, exc.message)
        if isinstance(exc, TimeoutError):
            return cls("run_timeout", "the run took longer than RUN_TIMEOUT_SECONDS")
        if isinstance(exc, asyncio.CancelledError):
            return cls("run_cancelled", "the run was cancelled")
        # Never str(exc) to clients: it may carry internals; the log has the traceback under error_id.
        return cls("internal_error", "the run failed unexpectedly")


DATABASE_UNAVAILABLE = RunFailure(DatabaseUnavailableError.code, "the database became unreachable during the run")
# What a run reports when its end could not be stored for any other reason (the cause is logged).
UNSTORED = RunFailure("internal_error", "the run's result could not be stored")

# The user's cancel (POST .../cancel): not a failure; the run ends with RUN_FINISHED outcome `cancelled`.
CANCELLED = RunFailure("run_cancelled", "the run was cancelled by its user")
# A draining process gives a run it could not finish within the grace to another replica (engine/runs/takeover/):
# not a failure either; this connection's stream ends with a RUN_ERROR of this code, the run goes on elsewhere.
HANDED_OVER = RunFailure(
    "run_handed_over", "this server is restarting: the run goes on on another one (resume its stream there)"
)


class RunEnding:
    """Records a run's end (`RunStore.finish`): retried with backoff on transient database errors for up to
    `deadline_seconds` (the lease: past it, the sweep records the run as lost anyway), and never torn by a
    cancellation of the run's task."""

    def __init__(self, store: RunStore, *, deadline_seconds: float) -> None:
        self._store = store
        self._deadline = deadline_seconds

    async def record(
        self,
        ctx: RequestContext,
        started: StartedRun,
        outcome: Literal["completed", "failed"],
        rows: list[NewMessage],
        *,
        error_code: str | None = None,
        error_id: str | None = None,
        run_status: Literal["completed", "failed", "cancelled"] | None = None,
        waiting: dict[str, JsonValue] | None = None,
    ) -> RunEnd | RunFailure:
        """The end as written, or what the run reports when it could not be (logged; the lease is the backstop)."""
        request = RunEndRequest(
            outcome=outcome,
            rows=rows,
            error_code=error_code,
            error_id=error_id,
            run_status=run_status or outcome,
            waiting=waiting,
        )
        writing = asyncio.ensure_future(self._write(ctx, started, request))
        cancelled = False
        while True:
            try:
                end = await asyncio.shield(writing)
                break
            except asyncio.CancelledError:
                if writing.cancelled():
                    raise
                # A cancel (shutdown, a lost lease) arriving now must not leave a half-recorded run: the write
                # goes on, and the caller still sends the terminal event it decides on.
                cancelled = True
        task = asyncio.current_task()
        if cancelled and task is not None:
            task.uncancel()
        return end

    async def _write(self, ctx: RequestContext, started: StartedRun, end: RunEndRequest) -> RunEnd | RunFailure:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline
        unavailable_deadline = loop.time() + UNAVAILABLE_RETRY_SECONDS
        delay = _FIRST_RETRY_SECONDS
        context = {"run_id": str(started.run_id), "session_id": str(started.session.id), "outcome": end.run_status}
        while True:
            try:
                return await self._store.finish(ctx, started, end)
            except Exception as exc:
                unavailable = is_unavailable(exc)
                if not unavailable and not isinstance(exc, _TRANSIENT_DB_ERRORS):
                    log.exception("could not record the run's end", extra=context)
                    return UNSTORED
                if loop.time() + delay > (unavailable_deadline if unavailable else deadline):
                    log.error("could not record the run's end; the sweep will fail it", exc_info=True, extra=context)
                    return DATABASE_UNAVAILABLE if unavailable else UNSTORED
                log.warning("recording the run's end failed; retrying", exc_info=True, extra=context)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_RETRY_SECONDS)
