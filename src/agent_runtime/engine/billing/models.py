"""What a model call consumed and what it cost: the two shapes billing reads and writes."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_serializer, model_validator

# Where a call's price came from; also stored in each billed message's metadata (engine/conversation/metadata.py).
# "custom_pricing": our price list with the provider's cache split. "all_miss": our price list, every prompt
# token at the cache-miss price, because the usage gave no (usable) cache split. "none": no price in force.
# "litellm_catalog" is no longer written: rows stored before dated prices carry it and must still validate.
CostSource = Literal["custom_pricing", "all_miss", "litellm_catalog", "none"]
# Which of a price entry's prices applied: DeepSeek's hour-dependent tiers, or the one price of a flat entry.
PriceTier = Literal["peak", "off_peak", "standard"]
# numeric(20,10) in the database: ten decimal places, stored exactly.
COST_QUANTUM = Decimal("0.0000000001")
TOKENS_PER_PRICE_UNIT = Decimal(1_000_000)


class LLMUsage(BaseModel):
    """Token counts of one call as the provider reported them.

    `cache_hit_tokens` / `cache_miss_tokens` are None when the provider said nothing about its prompt cache;
    that is not the same as zero hits, and billing treats it differently.
    """

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)
    cache_hit_tokens: int | None = Field(default=None, ge=0)
    cache_miss_tokens: int | None = Field(default=None, ge=0)


class CostBreakdown(BaseModel):
    """A call's cost and everything needed to recompute it later (`billing.cost.recompute_cost`).

    A priced breakdown names the price list entry (`price_effective_from`) and tier it was priced with; the
    token fields are the usage as priced (for `all_miss`, the cache counts as the provider reported them).
    """

    model_config = ConfigDict(frozen=True)

    cost: Decimal = Field(description="Amount in `currency`, quantized to 10 decimal places.")
    currency: Literal["CNY"] = "CNY"
    cost_source: CostSource
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cache_hit_tokens: int | None = Field(default=None, ge=0)
    cache_miss_tokens: int | None = Field(default=None, ge=0)
    price_tier: PriceTier | None = Field(default=None, description="None when unpriced.")
    price_effective_from: AwareDatetime | None = Field(
        default=None, description="`effective_from` of the price list entry used; None when unpriced."
    )

    @model_validator(mode="after")
    def _priced_names_its_price(self) -> CostBreakdown:
        # A priced cost that does not say which price it used could not be audited; an unpriced one naming a
        # price would claim one that was not applied.
        priced = self.cost_source in ("custom_pricing", "all_miss")
        named = (self.price_tier is not None, self.price_effective_from is not None)
        if named != (priced, priced):
            expected = "both" if priced else "neither"
            raise ValueError(f"cost_source {self.cost_source!r} needs {expected} of price_tier, price_effective_from")
        return self

    @field_serializer("cost", when_used="json")
    def _fixed_point(self, cost: Decimal) -> str:
        # str(Decimal) of a zero with 10 places is "0E-10"; JSON readers expect "0.0000000000".
        return format(cost, "f")

    @classmethod
    def unpriced(cls, usage: LLMUsage | None) -> CostBreakdown:
        """A call we cannot price in CNY: recorded with cost 0 and `cost_source="none"`, never guessed."""
        return cls(
            cost=Decimal(0).quantize(COST_QUANTUM),
            cost_source="none",
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            cache_hit_tokens=usage.cache_hit_tokens if usage else None,
            cache_miss_tokens=usage.cache_miss_tokens if usage else None,
        )
