"""CNY price list and per-call cost. Importing this package does not import LiteLLM."""

from agent_runtime.engine.billing.cost import (
    CacheSplit,
    CostCalculator,
    PriceNotFoundError,
    cache_split,
    precise_cost,
    quoted_cost,
    recompute_cost,
)
from agent_runtime.engine.billing.models import COST_QUANTUM, CostBreakdown, CostSource, LLMUsage, PriceTier
from agent_runtime.engine.billing.pricing import (
    ModelPrice,
    ModelPricing,
    PriceEntry,
    PriceQuote,
    PricingConfigError,
    PricingFile,
    PricingTable,
)
from agent_runtime.engine.billing.schedule import HolidayCalendar, PeakClock, PeakSchedule, PeakWindow

__all__ = [
    "COST_QUANTUM",
    "CacheSplit",
    "CostBreakdown",
    "CostCalculator",
    "CostSource",
    "HolidayCalendar",
    "LLMUsage",
    "ModelPrice",
    "ModelPricing",
    "PeakClock",
    "PeakSchedule",
    "PeakWindow",
    "PriceEntry",
    "PriceNotFoundError",
    "PriceQuote",
    "PriceTier",
    "PricingConfigError",
    "PricingFile",
    "PricingTable",
    "cache_split",
    "precise_cost",
    "quoted_cost",
    "recompute_cost",
]
