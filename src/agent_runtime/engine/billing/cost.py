"""Cost of one model call in CNY: precise from the price table first, LiteLLM's `completion_cost` second.

Precise pricing needs to know how many prompt tokens hit the provider's cache. It is used when usage gives
hits and/or misses (the missing side is `prompt - other`: DeepSeek guarantees hit + miss = prompt), or when
the model charges the same for both. A usage with no cache information at all is NOT priced as "all miss"
here: that would be a guess labelled as precise. It goes to the `completion_cost` fallback instead (which
does price every prompt token as a miss, and says so with `cost_source="litellm_catalog"`).

A model without a row in the table is recorded with cost 0 and `cost_source="none"`: LiteLLM's own catalog
is in USD and the design forbids currency conversion, so there is no CNY figure to fall back to.
"""

from __future__ import annotations

import logging
from decimal import ROUND_HALF_UP, Decimal, localcontext

from pydantic import BaseModel, ConfigDict

from agent_runtime.engine.billing import litellm_catalog
from agent_runtime.engine.billing.models import COST_QUANTUM, TOKENS_PER_PRICE_UNIT, CostBreakdown, LLMUsage
from agent_runtime.engine.billing.pricing import ModelPrice, PricedModel, PricingTable

logger = logging.getLogger(__name__)


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


class CostCalculator:
    def __init__(self, table: PricingTable) -> None:
        self.table = table
        self._catalog_ready = False

    def cost(self, model: str, usage: LLMUsage | None) -> CostBreakdown:
        priced = self.table.lookup(model)
        if usage is None or priced is None:
            return CostBreakdown.unpriced(usage)
        split = cache_split(usage, priced.price)
        if split is None:
            return self._catalog(priced, usage)
        return CostBreakdown(
            cost=precise_cost(priced.price, split, usage.completion_tokens),
            cost_source="custom_pricing",
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            cache_hit_tokens=split.hit,
            cache_miss_tokens=split.miss,
        )

    def _catalog(self, priced: PricedModel, usage: LLMUsage) -> CostBreakdown:
        try:
            if not self._catalog_ready:
                litellm_catalog.register_cny_prices(self.table)
                self._catalog_ready = True
            amount = litellm_catalog.catalog_cost(priced.key, usage)
        except Exception:
            # A finished call must still be recorded; an unpriced row is visible, a lost answer is not.
            logger.exception("completion_cost fallback failed for model %s", priced.key)
            return CostBreakdown.unpriced(usage)
        return CostBreakdown(
            cost=amount,
            cost_source="litellm_catalog",
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
        )
