from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query

from agent_runtime.api.deps import Caller, Engine, Paging
from agent_runtime.api.errors import error_responses
from agent_runtime.api.params import Rfc3339DateTime
from agent_runtime.engine.usage.models import SessionUsage, UsagePage

router = APIRouter(prefix="/v1", tags=["usage"])


@router.get("/sessions/{session_id}/usage", response_model=SessionUsage, responses=error_responses(401, 404, 422))
async def session_usage(session_id: UUID, engine: Engine, ctx: Caller) -> SessionUsage:
    """Input/output/cached tokens and CNY cost of a session, per stage and in total, summed by the database."""
    return await engine.usage.for_session(ctx, session_id)


@router.get("/usage", response_model=UsagePage, responses=error_responses(401, 422))
async def user_usage(
    engine: Engine,
    ctx: Caller,
    page: Paging,
    start: Annotated[Rfc3339DateTime | None, Query(description="Inclusive lower bound (RFC 3339).")] = None,
    end: Annotated[Rfc3339DateTime | None, Query(description="Exclusive upper bound (RFC 3339).")] = None,
) -> UsagePage:
    """The caller's totals over a date range, with a page of per-session sums (most expensive first), and what
    remains of their daily and monthly CNY budgets now (a run past either gets 402 `budget_exceeded`).

    422 when `start` is not before `end`.
    """
    return await engine.usage.for_user(ctx, start=start, end=end, limit=page.limit, offset=page.offset)
