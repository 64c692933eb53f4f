"""Token and cost sums, computed by the database from message rows (never from counters kept elsewhere)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.sessions.service import session_not_found
from agent_runtime.engine.usage.models import (
    BudgetStatus,
    SessionUsage,
    SessionUsageRow,
    StageUsage,
    UsagePage,
    UsageTotals,
)
from agent_runtime.settings import UserQuotas

# A row "is a model call" when it carries a cost source; user rows and tool results carry none.
SUMS = """
    COALESCE(sum(m.input_tokens), 0)::bigint AS input_tokens,
    COALESCE(sum(m.output_tokens), 0)::bigint AS output_tokens,
    COALESCE(sum((m.metadata ->> 'cached_tokens')::bigint), 0)::bigint AS cached_tokens,
    COALESCE(sum(m.cost), 0) AS cost,
    count(*) FILTER (WHERE m.metadata ? 'cost_source')::bigint AS model_calls
"""
_RANGE = "($2::timestamptz IS NULL OR m.created_at >= $2) AND ($3::timestamptz IS NULL OR m.created_at < $3)"


def totals_of(row: asyncpg.Record) -> UsageTotals:
    return UsageTotals(
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cached_tokens=row["cached_tokens"],
        cost=row["cost"],
        model_calls=row["model_calls"],
    )


_BUDGETS_SQL = """
SELECT coalesce(sum(cost) FILTER (WHERE created_at >= date_trunc('day', now(), 'UTC')), 0) AS spent_day,
       coalesce(sum(cost), 0) AS spent_month,
       date_trunc('day', now(), 'UTC') + interval '1 day' AS day_resets_at,
       date_trunc('month', now(), 'UTC') + interval '1 month' AS month_resets_at
  FROM agent_chat_messages
 WHERE user_id = $1 AND created_at >= date_trunc('month', now(), 'UTC')
"""


def _budget(
    name: Literal["daily", "monthly"], limit: Decimal | None, spent: Decimal, resets_at: datetime
) -> BudgetStatus:
    # The database's scale (numeric(20,10)), so that every amount reads alike.
    scale = Decimal("1E-10")
    capped = None if limit is None else limit.quantize(scale)
    remaining = None if capped is None else max(Decimal(0), capped - spent).quantize(scale)
    return BudgetStatus(budget=name, limit=capped, spent=spent, remaining=remaining, resets_at=resets_at)


class UsageService:
    def __init__(self, pool: asyncpg.Pool, quotas: UserQuotas) -> None:
        self._pool = pool
        self._quotas = quotas

    async def for_session(self, ctx: RequestContext, session_id: UUID) -> SessionUsage:
        async with self._pool.acquire() as conn:
            owned = await conn.fetchval(
                "SELECT 1 FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
            )
            if owned is None:
                raise session_not_found(session_id)
            rows = await conn.fetch(
                f"""
                SELECT COALESCE(m.metadata ->> 'stage', 'unknown') AS stage, {SUMS}
                FROM agent_chat_messages m
                WHERE m.session_id = $1 AND m.user_id = $2 AND m.metadata ? 'cost_source'
                GROUP BY GROUPING SETS ((1), ())
                ORDER BY GROUPING(COALESCE(m.metadata ->> 'stage', 'unknown')) DESC, 1
                """,
                session_id,
                ctx.user_id,
            )
        # The grand-total row (GROUPING SETS ()) sorts first; an empty session has only that row.
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
            totals = await conn.fetchrow(
                f"""
                SELECT {SUMS}, count(DISTINCT m.session_id) FILTER (WHERE m.metadata ? 'cost_source') AS sessions
                FROM agent_chat_messages m
                WHERE m.user_id = $1 AND m.metadata ? 'cost_source' AND {_RANGE}
                """,
                ctx.user_id,
                start,
                end,
            )
            rows = await conn.fetch(
                f"""
                SELECT m.session_id, s.title, {SUMS}
                FROM agent_chat_messages m
                JOIN agent_chat_sessions s ON s.id = m.session_id AND s.user_id = m.user_id
                WHERE m.user_id = $1 AND m.metadata ? 'cost_source' AND {_RANGE}
                GROUP BY m.session_id, s.title, s.created_at
                ORDER BY sum(m.cost) DESC, s.created_at DESC, m.session_id
                LIMIT $4 OFFSET $5
                """,
                ctx.user_id,
                start,
                end,
                limit,
                offset,
            )
            # The same sums the database checks before a run starts (migrations/0007), as of now.
            spent = await conn.fetchrow(_BUDGETS_SQL, ctx.user_id)
        assert totals is not None and spent is not None
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
                _budget("daily", self._quotas.daily_budget_cny, spent["spent_day"], spent["day_resets_at"]),
                _budget("monthly", self._quotas.monthly_budget_cny, spent["spent_month"], spent["month_resets_at"]),
            ],
        )


async def run_totals(pool: asyncpg.Pool, ctx: RequestContext, session_id: UUID, run_id: str) -> UsageTotals:
    """One run's tokens and cost, summed by the database from the rows the run wrote."""
    row = await pool.fetchrow(
        f"""
        SELECT {SUMS} FROM agent_chat_messages m
        WHERE m.session_id = $1 AND m.user_id = $2 AND m.metadata ->> 'run_id' = $3 AND m.metadata ? 'cost_source'
        """,
        session_id,
        ctx.user_id,
        run_id,
    )
    assert row is not None
    return totals_of(row)
