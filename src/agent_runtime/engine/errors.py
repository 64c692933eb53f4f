"""One error tree for the engine; the HTTP layer renders every subclass with one handler."""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import UUID

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(default_factory=list, description="Path of the offending field, if any.")
    msg: str
    type: str | None = None


class AppError(Exception):
    status_code: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        details: list[ErrorDetail] | None = None,
        extra: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.extra = extra or {}
        # Seconds, sent as the Retry-After header of a 429/503.
        self.retry_after = retry_after


class BadRequestError(AppError):
    status_code = 400
    code = "bad_request"


class UnauthorizedError(AppError):
    status_code = 401
    code = "unauthorized"


class NotFoundError(AppError):
    status_code = 404
    code = "not_found"


def session_not_found(session_id: UUID) -> NotFoundError:
    # Identical for "missing" and "someone else's" so that ids cannot be probed. Here, below the domains,
    # because sessions, messages, usage and runs all answer with it.
    return NotFoundError(f"session {session_id} not found")


class ConflictError(AppError):
    status_code = 409
    code = "conflict"


class RunInProgressError(ConflictError):
    code = "run_in_progress"


class TooManyRequestsError(AppError):
    status_code = 429
    code = "rate_limited"


class ServerBusyError(TooManyRequestsError):
    """This process runs as many runs as it may (MAX_CONCURRENT_RUNS)."""

    code = "server_busy"


class TooManyRunsError(TooManyRequestsError):
    """The caller already has MAX_CONCURRENT_RUNS_PER_USER runs in progress (on any replica)."""

    code = "too_many_runs"


class TooManySessionsError(TooManyRequestsError):
    """The caller owns MAX_SESSIONS_PER_USER sessions; deleting some makes room."""

    code = "too_many_sessions"


class TooManySearchesError(TooManyRequestsError):
    """The caller has as many memory searches in flight, or made as many this minute, as one user may."""

    code = "too_many_searches"


class BudgetExceededError(AppError):
    status_code = 402
    code = "budget_exceeded"


class RunLostError(AppError):
    """A run whose session was taken over (its lease expired): only in its RUN_ERROR, never an HTTP answer."""

    status_code = 409
    code = "run_lost"


class ShuttingDownError(AppError):
    status_code = 503
    code = "shutting_down"


class SearchBusyError(AppError):
    """This process runs as many memory searches as it may, across its users (USER_MEMORIES_SEARCHES_AT_ONCE)."""

    status_code = 503
    code = "search_busy"


class DatabaseUnavailableError(AppError):
    """PostgreSQL is away (down, restarting, unreachable) or did not answer within its deadlines (db/outage.py)."""

    status_code = 503
    code = "database_unavailable"

    def __init__(self, message: str = "the database is not reachable; retry shortly", *, retry_after: float = 2.0):
        # 2 s: long enough for a restart or failover to get noticed, short enough that nobody waits for nothing.
        super().__init__(message, retry_after=retry_after)


class ValidationFailedError(AppError):
    status_code = 422
    code = "validation_error"


class UpstreamError(AppError):
    status_code = 502
    code = "upstream_error"
