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


class BudgetStatus(BaseModel):
    """One of the caller's CNY budgets now (calendar day / month in UTC): what is spent (the stored per-message
    costs, and what runs whose process died are charged beyond them) and what runs in progress hold."""

    budget: Literal["daily", "monthly"]
    limit: Money | None = Field(description="USER_DAILY_BUDGET_CNY / USER_MONTHLY_BUDGET_CNY; null: no limit.")
    spent: Money
    reserved: Money = Field(
        description="The worst-case cost the caller's runs in progress hold against the budget until they end."
    )
    remaining: Money | None = Field(
        description="limit - spent - reserved (0 when used up); null: no limit. A run is admitted only if its "
        "worst-case cost fits in it."
    )
    resets_at: datetime


class UsagePage(BaseModel):
    """The caller's usage over [start, end), paginated per session (most expensive first), and their budgets."""

    start: datetime | None
    end: datetime | None
    totals: UsageTotals
    items: list[SessionUsageRow]
    total: int = Field(description="Number of sessions with usage in the range.")
    limit: int
    offset: int
    budgets: list[BudgetStatus] = Field(description="The daily and monthly budgets as of now (not the range).")
