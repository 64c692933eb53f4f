from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field

from agent_runtime.engine.money import Money


class UsageTotals(BaseModel):
    input_tokens: int
    output_tokens: int
    cached_tokens: int = Field(description="Input tokens served from the provider's prompt cache.")
    cost: Money
    currency: Literal["CNY"] = "CNY"
    model_calls: int = Field(description="Rows that carry a model call's usage.")


class StageUsage(UsageTotals):
    stage: str


class SessionUsage(BaseModel):
    session_id: UUID
    total: UsageTotals
    by_stage: list[StageUsage]


class SessionUsageRow(UsageTotals):
    session_id: UUID
    title: str | None


class UsagePage(BaseModel):
    """The caller's usage over [start, end), paginated per session (most expensive first)."""

    start: datetime | None
    end: datetime | None
    totals: UsageTotals
    items: list[SessionUsageRow]
    total: int = Field(description="Number of sessions with usage in the range.")
    limit: int
    offset: int
