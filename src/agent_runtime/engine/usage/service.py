"""Token and cost sums, computed by the database from message rows (never from counters kept elsewhere)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError, session_not_found
from agent_runtime.engine.usage.models import (
    BudgetStatus,
    SessionUsage,
    SessionUsageRow,
    StageUsage,
    UsagePage,
    UsageTotals,
)
from agent_runtime.engine.usage.repository import (
    BUDGETS_SQL,
    RUN_TOTALS_SQL,
    SESSION_BY_STAGE_SQL,
    SESSION_OWNED_SQL,
    USER_BY_SESSION_SQL,
    USER_TOTALS_SQL,
    totals_of,
)
from agent_runtime.settings import UserQuotas


def _budget(
    name: Literal["daily", "monthly"], limit: Decimal | None, spent: Decimal, reserved: Decimal, resets_at: datetime
) -> BudgetStatus:
    # The database's scale (numeric(20,10)), so that every amount reads alike.
    scale = Decimal("1E-10")
    capped = None if limit is None else limit.quantize(scale)
    remaining = None if capped is None else max(Decimal(0), capped - spent - reserved).quantize(scale)
    return BudgetStatus(
        budget=name,
        limit=capped,
        spent=spent.quantize(scale),
        reserved=reserved.quantize(scale),
        remaining=remaining,
        resets_at=resets_at,
    )


class UsageService:
    def __init__(self, pool: asyncpg.Pool, quotas: UserQuotas) -> None:
        self._pool = pool
        self._quotas = quotas

    async def for_session(self, ctx: RequestContext, session_id: UUID) -> SessionUsage:
        async with self._pool.acquire() as conn:
            owned = await conn.fetchval(SESSION_OWNED_SQL, session_id, ctx.user_id)
            if owned is None:
                raise session_not_found(session_id)
            rows = await conn.fetch(SESSION_BY_STAGE_SQL, session_id, ctx.user_id)
        total = totals_of(rows[0])
        by_stage = [StageUsage(stage=r["stage"], **totals_of(r).model_dump()) for r in rows[1:]]
        return SessionUsage(session_id=session_id, total=total, by_stage=by_stage)

    async def for_user(
        self, ctx: RequestContext, *, start: datetime | None, end: datetime | None, limit: int, offset: int
    ) -> UsagePage:
        if start is not None and end is not None and start >= end:
            raise ValidationFailedError(
                "start must be before end", details=[ErrorDetail(loc=["query", "end"], msg="must be after start")]
            )
        async with self._pool.acquire() as conn:
            totals = await conn.fetchrow(USER_TOTALS_SQL, ctx.user_id, start, end)
            rows = await conn.fetch(USER_BY_SESSION_SQL, ctx.user_id, start, end, limit, offset)
            use = await conn.fetchrow(BUDGETS_SQL, ctx.user_id)
        assert totals is not None and use is not None
        items = [
            SessionUsageRow(session_id=r["session_id"], title=r["title"], **totals_of(r).model_dump()) for r in rows
        ]
        return UsagePage(
            start=start,
            end=end,
            totals=totals_of(totals),
            items=items,
            total=totals["sessions"],
            limit=limit,
            offset=offset,
            budgets=[
                _budget(
                    "daily", self._quotas.daily_budget_cny, use["spent_day"], use["reserved"], use["day_resets_at"]
                ),
                _budget(
                    "monthly",
                    self._quotas.monthly_budget_cny,
                    use["spent_month"],
                    use["reserved"],
                    use["month_resets_at"],
                ),
            ],
        )


async def run_totals(pool: asyncpg.Pool, ctx: RequestContext, session_id: UUID, run_id: str) -> UsageTotals:
    """One run's tokens and cost, summed by the database from the rows the run wrote."""
    row = await pool.fetchrow(RUN_TOTALS_SQL, session_id, ctx.user_id, run_id)
    assert row is not None
    return totals_of(row)
