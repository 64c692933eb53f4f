"""CNY price table and per-call cost. Importing this package does not import LiteLLM."""

from agent_runtime.engine.billing.cost import CacheSplit, CostCalculator, cache_split, precise_cost
from agent_runtime.engine.billing.models import COST_QUANTUM, CostBreakdown, LLMUsage
from agent_runtime.engine.billing.pricing import ModelPrice, PricedModel, PricingConfigError, PricingFile, PricingTable

__all__ = [
    "COST_QUANTUM",
    "CacheSplit",
    "CostBreakdown",
    "CostCalculator",
    "LLMUsage",
    "ModelPrice",
    "PricedModel",
    "PricingConfigError",
    "PricingFile",
    "PricingTable",
    "cache_split",
    "precise_cost",
]
