"""What a model call consumed and what it cost: the two shapes billing reads and writes."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

# Where a call's price came from; also stored in each billed message's metadata (engine/messages/metadata.py).
CostSource = Literal["custom_pricing", "litellm_catalog", "none"]
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
    model_config = ConfigDict(frozen=True)

    cost: Decimal = Field(description="Amount in `currency`, quantized to 10 decimal places.")
    currency: Literal["CNY"] = "CNY"
    cost_source: CostSource
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cache_hit_tokens: int | None = Field(default=None, ge=0)
    cache_miss_tokens: int | None = Field(default=None, ge=0)

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
