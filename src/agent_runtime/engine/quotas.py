"""Per-user quotas and budgets: the database enforces them (migrations/0003, 0007); this maps its refusals.

The triggers raise with their own SQLSTATEs (class `AR`, not used by PostgreSQL) and a JSON DETAIL; each
becomes the HTTP error the client gets before any stream starts.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal

import asyncpg
from pydantic import BaseModel, Field

from agent_runtime.engine.errors import (
    AppError,
    BudgetExceededError,
    ErrorDetail,
    TooManyRequestsError,
    TooManyRunsError,
    TooManySessionsError,
)

RUNS_IN_PROGRESS = "AR429"
RUNS_PER_MINUTE = "AR430"
SESSIONS = "AR431"
BUDGET = "AR402"
# A client refused for its own runs in progress is told to wait this long: a run takes a few seconds.
_RUNS_IN_PROGRESS_RETRY_AFTER = 2


class _RateDetail(BaseModel):
    retry_after: float


class _BudgetDetail(BaseModel):
    budget: str
    limit: Decimal
    spent: Decimal
    reserved: Decimal
    needed: Decimal = Field(description="The refused run's reservation: its worst-case cost.")
    resets_at: datetime


def _cny(amount: Decimal) -> str:
    # At most the ledger's 10 places, without trailing zeros: "0.001", "5", "0.0148".
    return f"{amount.quantize(Decimal('1E-10')).normalize():f}"


def quota_error(exc: asyncpg.PostgresError) -> AppError | None:
    """The client-facing error for a quota the database refused; None for any other database error."""
    state = exc.sqlstate
    if state == RUNS_IN_PROGRESS:
        return TooManyRunsError(
            "you have as many runs in progress as you may (MAX_CONCURRENT_RUNS_PER_USER)",
            retry_after=_RUNS_IN_PROGRESS_RETRY_AFTER,
        )
    if state == RUNS_PER_MINUTE:
        rate = _RateDetail.model_validate(json.loads(exc.detail or "{}"))
        return TooManyRequestsError(
            "you started as many runs in the last minute as you may (MAX_RUNS_PER_USER_PER_MINUTE)",
            retry_after=max(1, math.ceil(rate.retry_after)),
        )
    if state == SESSIONS:
        return TooManySessionsError("you have as many sessions as you may (MAX_SESSIONS_PER_USER); delete some")
    if state == BUDGET:
        budget = _BudgetDetail.model_validate(json.loads(exc.detail or "{}"))
        resets = budget.resets_at.astimezone(UTC)
        left = max(Decimal(0), budget.limit - budget.spent - budget.reserved)
        return BudgetExceededError(
            f"your {budget.budget} budget of {_cny(budget.limit)} CNY has {_cny(left)} CNY left "
            f"({_cny(budget.spent)} spent, {_cny(budget.reserved)} held by runs in progress), and a run may cost "
            f"up to {_cny(budget.needed)}; it resets at {resets.isoformat().replace('+00:00', 'Z')}",
            details=[ErrorDetail(loc=["budget", budget.budget], msg=f"resets at {resets.isoformat()}")],
            retry_after=max(1, math.ceil((resets - datetime.now(UTC)).total_seconds())),
        )
    return None
