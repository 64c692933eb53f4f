"""Our CNY prices inside LiteLLM's cost map, for the `completion_cost` fallback.

LiteLLM's map is process-global and its public `deepseek/deepseek-chat` entry is in USD. Registering CNY
figures over it would make every USD cost computed elsewhere in the process silently wrong, so each model is
registered under an alias in a provider namespace of our own (`agent-runtime-cny/<model>`).
"""

from __future__ import annotations

from decimal import Decimal

from agent_runtime.engine.billing.models import COST_QUANTUM, TOKENS_PER_PRICE_UNIT, LLMUsage
from agent_runtime.engine.billing.pricing import PricingConfigError, PricingTable
from agent_runtime.engine.litellm_import import load_litellm

ALIAS_PROVIDER = "agent-runtime-cny"


def cny_alias(model_key: str) -> str:
    return f"{ALIAS_PROVIDER}/{model_key.rsplit('/', 1)[-1]}"


def register_cny_prices(table: PricingTable) -> None:
    """Idempotent: registering the same figures again leaves the map unchanged."""
    entries: dict[str, dict[str, object]] = {}
    for key, price in table.pricing.models.items():
        alias = cny_alias(key)
        if alias in entries:
            raise PricingConfigError(f"{table.source}: models.{key}: LiteLLM alias {alias!r} is already taken")
        entries[alias] = {
            "input_cost_per_token": float(price.input_cache_miss / TOKENS_PER_PRICE_UNIT),
            "cache_read_input_token_cost": float(price.input_cache_hit / TOKENS_PER_PRICE_UNIT),
            "output_cost_per_token": float(price.output / TOKENS_PER_PRICE_UNIT),
            "litellm_provider": ALIAS_PROVIDER,
            "mode": "chat",
        }
    load_litellm().register_model(entries)


def catalog_cost(model_key: str, usage: LLMUsage) -> Decimal:
    """`litellm.completion_cost` on the CNY alias; every prompt token is priced as a cache miss."""
    litellm = load_litellm()
    alias = cny_alias(model_key)
    response = litellm.ModelResponse(
        model=alias,
        usage=litellm.Usage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
        ),
    )
    value = litellm.completion_cost(completion_response=response, model=alias, custom_llm_provider=ALIAS_PROVIDER)
    # LiteLLM computes in binary floats; its shortest repr is the closest decimal to what it meant.
    return Decimal(repr(float(value))).quantize(COST_QUANTUM)
