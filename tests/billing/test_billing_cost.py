"""Exact CNY cost of a call, precise formula and completion_cost fallback."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agent_runtime.engine.billing import CostBreakdown, CostCalculator, LLMUsage, PricingTable
from agent_runtime.resources import default_config_dir

TABLE = PricingTable.load(default_config_dir() / "pricing.yaml")


@pytest.fixture(scope="module")
def calculator() -> CostCalculator:
    return CostCalculator(TABLE)


def usage(prompt: int, completion: int, hit: int | None = None, miss: int | None = None) -> LLMUsage:
    return LLMUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
    )


def precise(cost: str, prompt: int, completion: int, hit: int, miss: int) -> CostBreakdown:
    return CostBreakdown(
        cost=Decimal(cost),
        cost_source="custom_pricing",
        input_tokens=prompt,
        output_tokens=completion,
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
    )


# deepseek-chat: 0.2 (cache hit) / 2 (cache miss) / 3 (output) CNY per million tokens.
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (usage(1_000_000, 0, hit=1_000_000, miss=0), precise("0.2000000000", 1_000_000, 0, 1_000_000, 0)),
        (usage(1_000_000, 0, hit=0, miss=1_000_000), precise("2.0000000000", 1_000_000, 0, 0, 1_000_000)),
        # 1000 * 0.2 + 234 * 2 + 567 * 3 = 2369
        (usage(1234, 567, hit=1000, miss=234), precise("0.0023690000", 1234, 567, 1000, 234)),
        (usage(10, 0, hit=0, miss=10), precise("0.0000200000", 10, 0, 0, 10)),
        (usage(0, 1, hit=0, miss=0), precise("0.0000030000", 0, 1, 0, 0)),
        (usage(1, 0, hit=1, miss=0), precise("0.0000002000", 1, 0, 1, 0)),
        # 10^9 tokens of each kind: 1000 * (0.2 + 2 + 3)
        (usage(2 * 10**9, 10**9, hit=10**9, miss=10**9), precise("5200.0000000000", 2 * 10**9, 10**9, 10**9, 10**9)),
        # Only OpenAI-style cached tokens (streamed usage): miss = prompt - hit.
        (usage(1000, 100, hit=300), precise("0.0017600000", 1000, 100, 300, 700)),
        # Only the miss count: hit = prompt - miss.
        (usage(1000, 100, miss=700), precise("0.0017600000", 1000, 100, 300, 700)),
    ],
)
def test_precise_cost(calculator: CostCalculator, given: LLMUsage, expected: CostBreakdown) -> None:
    assert calculator.cost("deepseek/deepseek-chat", given) == expected


def test_both_model_names_resolve_to_the_same_row(calculator: CostCalculator) -> None:
    given = usage(1234, 567, hit=1000, miss=234)
    assert calculator.cost("deepseek-chat", given) == calculator.cost("deepseek/deepseek-chat", given)


def test_no_cache_information_falls_back_to_completion_cost(calculator: CostCalculator) -> None:
    # Every prompt token at the cache-miss price: 1000 * 2 + 1000 * 3 = 5000 per million.
    assert calculator.cost("deepseek-chat", usage(1000, 1000)) == CostBreakdown(
        cost=Decimal("0.0050000000"), cost_source="litellm_catalog", input_tokens=1000, output_tokens=1000
    )


def test_inconsistent_cache_counts_fall_back_too(calculator: CostCalculator) -> None:
    assert calculator.cost("deepseek-chat", usage(100, 0, hit=500)).cost_source == "litellm_catalog"


def test_demo_model_costs_zero_precisely_even_without_cache_information(calculator: CostCalculator) -> None:
    assert calculator.cost("demo/agent", usage(40, 60)) == precise("0", 40, 60, 0, 40)


def test_unknown_model_or_missing_usage_is_unpriced(calculator: CostCalculator) -> None:
    assert calculator.cost("openai/gpt-4o", usage(10, 5, hit=0, miss=10)) == CostBreakdown(
        cost=Decimal(0), cost_source="none", input_tokens=10, output_tokens=5, cache_hit_tokens=0, cache_miss_tokens=10
    )
    assert calculator.cost("deepseek-chat", None) == CostBreakdown(
        cost=Decimal(0), cost_source="none", input_tokens=0, output_tokens=0
    )


def test_rounding_is_half_up_at_ten_places() -> None:
    from agent_runtime.engine.billing import ModelPrice, PricingFile

    price = ModelPrice(input_cache_hit=Decimal(0), input_cache_miss=Decimal(0), output=Decimal("0.00005"))
    table = PricingTable(PricingFile(currency="CNY", models={"m/x": price}))
    # 1 token at 0.00005 per million = 5e-11, which rounds half up to 1e-10; 4e-11 rounds down to 0.
    assert CostCalculator(table).cost("m/x", usage(0, 1, hit=0, miss=0)).cost == Decimal("0.0000000001")
    table4 = PricingTable(
        PricingFile(currency="CNY", models={"m/x": price.model_copy(update={"output": Decimal("0.00004")})})
    )
    assert CostCalculator(table4).cost("m/x", usage(0, 1, hit=0, miss=0)).cost == Decimal(0)


def test_cost_serializes_as_fixed_point_text() -> None:
    breakdown = CostBreakdown(cost=Decimal("0E-10"), cost_source="none", input_tokens=0, output_tokens=0)
    assert breakdown.model_dump(mode="json")["cost"] == "0.0000000000"
    assert precise("5200.0000000000", 0, 0, 0, 0).model_dump_json().startswith('{"cost":"5200.0000000000"')
