"""Cost of one model call in CNY, from the price list entry and tier in force when the call started.

Precise pricing needs to know how many prompt tokens hit the provider's cache. It is used when usage gives
hits and/or misses (the missing side is `prompt - other`: DeepSeek guarantees hit + miss = prompt), or when
the model charges the same for both (`cost_source="custom_pricing"`). A usage with no usable cache split is
priced with every prompt token a miss, and says so (`cost_source="all_miss"`): an upper bound (a hit never
costs more than a miss at DeepSeek), never a guess labelled as precise. LiteLLM's `completion_cost` did that
before, from CNY prices registered in its process-global map; one price per model there cannot follow prices
that change with the hour and the date.

A model with no price in force at the call's start (no row, before its first entry, after `retired_at`) is
recorded with cost 0 and `cost_source="none"`, with a warning: LiteLLM's own catalog is in USD and the design
forbids currency conversion, so there is no CNY figure to fall back to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, localcontext

from pydantic import BaseModel, ConfigDict

from agent_runtime.engine.billing.models import COST_QUANTUM, TOKENS_PER_PRICE_UNIT, CostBreakdown, LLMUsage, PriceTier
from agent_runtime.engine.billing.pricing import ModelPrice, PriceQuote, PricingTable
from agent_runtime.engine.errors import AppError

logger = logging.getLogger(__name__)


class PriceNotFoundError(AppError):
    """An audit named a price list entry or tier that the table does not have."""

    code = "price_not_found"


class CacheSplit(BaseModel):
    model_config = ConfigDict(frozen=True)

    hit: int
    miss: int


def cache_split(usage: LLMUsage, price: ModelPrice) -> CacheSplit | None:
    prompt, hit, miss = usage.prompt_tokens, usage.cache_hit_tokens, usage.cache_miss_tokens
    if hit is not None and miss is not None:
        return CacheSplit(hit=hit, miss=miss)
    if hit is not None and hit <= prompt:
        return CacheSplit(hit=hit, miss=prompt - hit)
    if miss is not None and miss <= prompt:
        return CacheSplit(hit=prompt - miss, miss=miss)
    if hit is None and miss is None and not price.cache_split_matters:
        return CacheSplit(hit=0, miss=prompt)
    return None


def precise_cost(price: ModelPrice, split: CacheSplit, output_tokens: int) -> Decimal:
    with localcontext() as ctx:
        # Default precision (28 digits) would already hold 10^15 tokens; 50 leaves no doubt.
        ctx.prec = 50
        total = split.hit * price.input_cache_hit + split.miss * price.input_cache_miss + output_tokens * price.output
        return (total / TOKENS_PER_PRICE_UNIT).quantize(COST_QUANTUM, rounding=ROUND_HALF_UP)


def quoted_cost(quote: PriceQuote, usage: LLMUsage) -> CostBreakdown:
    """The cost of `usage` at `quote`'s price: what `CostCalculator.cost` records and an audit recomputes."""
    split = cache_split(usage, quote.price)
    all_miss = CacheSplit(hit=0, miss=usage.prompt_tokens)
    return CostBreakdown(
        cost=precise_cost(quote.price, split or all_miss, usage.completion_tokens),
        cost_source="all_miss" if split is None else "custom_pricing",
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        # An all-miss row keeps the cache counts as reported (None, or inconsistent): they are what it was
        # priced from, and recomputing from them prices it all-miss again.
        cache_hit_tokens=usage.cache_hit_tokens if split is None else split.hit,
        cache_miss_tokens=usage.cache_miss_tokens if split is None else split.miss,
        price_tier=quote.tier,
        price_effective_from=quote.effective_from,
    )


def recompute_cost(
    table: PricingTable, model: str, usage: LLMUsage, *, tier: PriceTier, effective_from: datetime
) -> CostBreakdown:
    """A stored cost again, from its model, usage, `price_tier` and `price_effective_from`, for audits.

    Needs no clock and no schedule: the stored tier says which price applied. Raises `PriceNotFoundError`
    when the table has no such entry or tier (the price list was edited, or the row is not from this table).
    """
    quote = table.quote_entry(model, effective_from, tier)
    if quote is None:
        raise PriceNotFoundError(
            f"{table.source}: {model} has no {tier} price effective from {effective_from.isoformat()}"
        )
    return quoted_cost(quote, usage)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class CostCalculator:
    def __init__(self, table: PricingTable, *, clock: Callable[[], datetime] = _utc_now) -> None:
        """`clock` is what `at=None` means; a test pins it to price "now" at a known tier."""
        self.table = table
        self._clock = clock

    def cost(self, model: str, usage: LLMUsage | None, *, at: datetime | None = None) -> CostBreakdown:
        """The call priced at `at`, when it started (None: now), with the price list entry in force then."""
        if usage is None:
            return CostBreakdown.unpriced(usage)
        started = self._clock() if at is None else at
        quote = self.table.quote(model, started)
        if quote is None:
            logger.warning("no CNY price in force for model %s at %s: recorded unpriced", model, started.isoformat())
            return CostBreakdown.unpriced(usage)
        return quoted_cost(quote, usage)
