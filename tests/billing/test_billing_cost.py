"""Exact CNY cost of a call at its start time: the precise formula, the all-miss fallback, unpriced calls, and
recomputing a stored cost for an audit."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from tests.billing.price_lists import CHAT_READ, DEMO_SINCE, PRICES_READ, SHIPPED, beijing, cited, flat, table_of, usage

from agent_runtime.engine.billing import (
    CostBreakdown,
    CostCalculator,
    CostSource,
    LLMUsage,
    ModelPrice,
    PriceNotFoundError,
    PriceTier,
    recompute_cost,
)

PEAK = beijing(2026, 12, 1, 10)  # Tuesday 10:00 Beijing
OFF_PEAK = beijing(2026, 12, 1, 20)  # Tuesday 20:00 Beijing


@pytest.fixture(scope="module")
def calculator() -> CostCalculator:
    return CostCalculator(SHIPPED)


def precise(
    cost: str,
    prompt: int,
    completion: int,
    hit: int,
    miss: int,
    tier: PriceTier = "peak",
    since: datetime = PRICES_READ,
) -> CostBreakdown:
    return CostBreakdown(
        cost=Decimal(cost),
        cost_source="custom_pricing",
        input_tokens=prompt,
        output_tokens=completion,
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
        price_tier=tier,
        price_effective_from=since,
    )


def all_miss(
    cost: str, prompt: int, completion: int, hit: int | None = None, miss: int | None = None, tier: PriceTier = "peak"
) -> CostBreakdown:
    return CostBreakdown(
        cost=Decimal(cost),
        cost_source="all_miss",
        input_tokens=prompt,
        output_tokens=completion,
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
        price_tier=tier,
        price_effective_from=PRICES_READ,
    )


# Flash peak: 0.04 (cache hit) / 2 (cache miss) / 8 (output) CNY per million tokens; off-peak half of that.
PRECISE_CASES = [
    (
        "deepseek-flash",
        PEAK,
        usage(1_000_000, 0, hit=1_000_000, miss=0),
        precise("0.0400000000", 1_000_000, 0, 1_000_000, 0),
    ),
    (
        "deepseek-flash",
        PEAK,
        usage(1_000_000, 0, hit=0, miss=1_000_000),
        precise("2.0000000000", 1_000_000, 0, 0, 1_000_000),
    ),
    # 1000 * 0.04 + 234 * 2 + 567 * 8 = 5044
    ("deepseek-flash", PEAK, usage(1234, 567, hit=1000, miss=234), precise("0.0050440000", 1234, 567, 1000, 234)),
    ("deepseek-flash", PEAK, usage(10, 0, hit=0, miss=10), precise("0.0000200000", 10, 0, 0, 10)),
    ("deepseek-flash", PEAK, usage(0, 1, hit=0, miss=0), precise("0.0000080000", 0, 1, 0, 0)),
    ("deepseek-flash", PEAK, usage(1, 0, hit=1, miss=0), precise("0.0000000400", 1, 0, 1, 0)),
    # 10^9 tokens of each kind: 1000 * (0.04 + 2 + 8)
    (
        "deepseek-flash",
        PEAK,
        usage(2 * 10**9, 10**9, hit=10**9, miss=10**9),
        precise("10040.0000000000", 2 * 10**9, 10**9, 10**9, 10**9),
    ),
    # Only OpenAI-style cached tokens (streamed usage): miss = prompt - hit. 300 * 0.04 + 700 * 2 + 100 * 8 = 2212
    ("deepseek-flash", PEAK, usage(1000, 100, hit=300), precise("0.0022120000", 1000, 100, 300, 700)),
    # Only the miss count: hit = prompt - miss.
    ("deepseek-flash", PEAK, usage(1000, 100, miss=700), precise("0.0022120000", 1000, 100, 300, 700)),
    # Off-peak, half price: 1000 * 0.02 + 234 * 1 + 567 * 4 = 2522
    (
        "deepseek-flash",
        OFF_PEAK,
        usage(1234, 567, hit=1000, miss=234),
        precise("0.0025220000", 1234, 567, 1000, 234, "off_peak"),
    ),
    (
        "deepseek-v4-flash",
        OFF_PEAK,
        usage(1234, 567, hit=1000, miss=234),
        precise("0.0025220000", 1234, 567, 1000, 234, "off_peak"),
    ),
    # Pro: 1000 * 0.30 + 234 * 9 + 567 * 27 = 17715 at peak; 1000 * 0.15 + 234 * 4.5 + 567 * 13.5 = 8857.5 off-peak
    ("deepseek-v4-pro", PEAK, usage(1234, 567, hit=1000, miss=234), precise("0.0177150000", 1234, 567, 1000, 234)),
    (
        "deepseek-v4-pro",
        OFF_PEAK,
        usage(1234, 567, hit=1000, miss=234),
        precise("0.0088575000", 1234, 567, 1000, 234, "off_peak"),
    ),
    # The retired deepseek-chat while it was served, flat 0.2 / 2 / 3: 1000 * 0.2 + 234 * 2 + 567 * 3 = 2369
    (
        "deepseek-chat",
        datetime(2026, 6, 1, 2, tzinfo=UTC),
        usage(1234, 567, hit=1000, miss=234),
        precise("0.0023690000", 1234, 567, 1000, 234, "standard", CHAT_READ),
    ),
    # The demo model charges the same for hits and misses, so no cache information is still precise.
    ("demo/agent", PEAK, usage(40, 60), precise("0", 40, 60, 0, 40, "standard", DEMO_SINCE)),
]


@pytest.mark.parametrize(("model", "at", "given", "expected"), PRECISE_CASES)
def test_precise_cost(
    calculator: CostCalculator, model: str, at: datetime, given: LLMUsage, expected: CostBreakdown
) -> None:
    assert calculator.cost(model, given, at=at) == expected


ALL_MISS_CASES = [
    # No cache information: every prompt token at the cache-miss price. 1000 * 2 + 1000 * 8 = 10000 at peak.
    ("deepseek-flash", PEAK, usage(1000, 1000), all_miss("0.0100000000", 1000, 1000)),
    ("deepseek-flash", OFF_PEAK, usage(1000, 1000), all_miss("0.0050000000", 1000, 1000, tier="off_peak")),
    # Cache counts that cannot be true (more hits than prompt tokens) are kept as reported, and not trusted.
    ("deepseek-flash", PEAK, usage(100, 0, hit=500), all_miss("0.0002000000", 100, 0, hit=500)),
    ("deepseek-flash", PEAK, usage(100, 0, miss=500), all_miss("0.0002000000", 100, 0, miss=500)),
]


@pytest.mark.parametrize(("model", "at", "given", "expected"), ALL_MISS_CASES)
def test_without_a_usable_cache_split_every_prompt_token_is_a_miss(
    calculator: CostCalculator, model: str, at: datetime, given: LLMUsage, expected: CostBreakdown
) -> None:
    assert calculator.cost(model, given, at=at) == expected


@pytest.mark.parametrize(
    ("model", "at"),
    [
        ("openai/gpt-4o", PEAK),  # no row
        ("deepseek-chat", PEAK),  # retired 2026-07-24 15:59 UTC
        ("deepseek-flash", datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)),  # before its first entry
    ],
)
def test_no_price_in_force_is_unpriced_with_a_warning(
    calculator: CostCalculator, caplog: pytest.LogCaptureFixture, model: str, at: datetime
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent_runtime.engine.billing.cost"):
        cost = calculator.cost(model, usage(10, 5, hit=0, miss=10), at=at)
    assert cost == CostBreakdown(
        cost=Decimal(0), cost_source="none", input_tokens=10, output_tokens=5, cache_hit_tokens=0, cache_miss_tokens=10
    )
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"no CNY price in force for model {model} at {at.isoformat()}: recorded unpriced")
    ]


def test_missing_usage_is_unpriced(calculator: CostCalculator) -> None:
    assert calculator.cost("deepseek-flash", None, at=PEAK) == CostBreakdown(
        cost=Decimal(0), cost_source="none", input_tokens=0, output_tokens=0
    )


def test_a_price_change_mid_day_prices_each_call_by_its_start() -> None:
    old, new = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 12, 2, 4, tzinfo=UTC)  # new: 12:00 Beijing
    calculator = CostCalculator(table_of("m/x", cited(old, flat("1")), cited(new, flat("0"))))
    given = usage(0, 1_000_000, hit=0, miss=0)
    just_before, at_the_change = beijing(2026, 12, 2, 11, 59, 59), beijing(2026, 12, 2, 12)
    assert [calculator.cost("m/x", given, at=at) for at in (just_before, at_the_change)] == [
        precise("1.0000000000", 0, 1_000_000, 0, 0, "standard", old),
        precise("0", 0, 1_000_000, 0, 0, "standard", new),
    ]


def test_at_none_is_the_clocks_now() -> None:
    given = usage(1234, 567, hit=1000, miss=234)
    assert CostCalculator(SHIPPED, clock=lambda: OFF_PEAK).cost("deepseek-flash", given) == precise(
        "0.0025220000", 1234, 567, 1000, 234, "off_peak"
    )
    # The default clock is aware UTC (a naive one would be refused by the table).
    assert CostCalculator(SHIPPED).cost("demo/agent", given).price_tier == "standard"


@pytest.mark.parametrize(
    ("model", "at", "given", "expected"),
    PRECISE_CASES + ALL_MISS_CASES,
)
def test_recompute_agrees_with_cost(
    calculator: CostCalculator, model: str, at: datetime, given: LLMUsage, expected: CostBreakdown
) -> None:
    stored = calculator.cost(model, given, at=at)
    assert stored.price_tier is not None and stored.price_effective_from is not None
    # From the call's usage, and from nothing but the stored row (no clock, no schedule).
    from_row = LLMUsage(
        prompt_tokens=stored.input_tokens,
        completion_tokens=stored.output_tokens,
        total_tokens=stored.input_tokens + stored.output_tokens,
        cache_hit_tokens=stored.cache_hit_tokens,
        cache_miss_tokens=stored.cache_miss_tokens,
    )
    for recorded in (given, from_row):
        again = recompute_cost(
            SHIPPED, model, recorded, tier=stored.price_tier, effective_from=stored.price_effective_from
        )
        assert again == stored == expected


@pytest.mark.parametrize(
    ("model", "tier", "since", "message"),
    [
        (
            "deepseek-flash",
            "standard",
            PRICES_READ,
            "deepseek-flash has no standard price effective from 2026-12-01T00:00:00+00:00",
        ),
        (
            "deepseek-flash",
            "peak",
            CHAT_READ,
            "deepseek-flash has no peak price effective from 2026-03-06T00:00:00+00:00",
        ),
        (
            "openai/gpt-4o",
            "peak",
            PRICES_READ,
            "openai/gpt-4o has no peak price effective from 2026-12-01T00:00:00+00:00",
        ),
    ],
)
def test_recompute_of_an_entry_the_table_lacks_says_which(
    model: str, tier: PriceTier, since: datetime, message: str
) -> None:
    with pytest.raises(PriceNotFoundError) as caught:
        recompute_cost(SHIPPED, model, usage(1, 1, hit=0, miss=1), tier=tier, effective_from=since)
    assert caught.value.message == f"{SHIPPED.source}: {message}"


def test_rounding_is_half_up_at_ten_places() -> None:
    def one_output_token(output: str) -> Decimal:
        price = ModelPrice(input_cache_hit=Decimal(0), input_cache_miss=Decimal(0), output=Decimal(output))
        table = table_of("m/x", cited(DEMO_SINCE, price))
        return CostCalculator(table).cost("m/x", usage(0, 1, hit=0, miss=0), at=PEAK).cost

    # 1 token at 0.00005 per million = 5e-11, which rounds half up to 1e-10; 4e-11 rounds down to 0.
    assert [one_output_token("0.00005"), one_output_token("0.00004")] == [Decimal("1E-10"), Decimal(0)]


def test_cost_serializes_as_fixed_point_text_with_its_price() -> None:
    breakdown = CostBreakdown(cost=Decimal("0E-10"), cost_source="none", input_tokens=0, output_tokens=0)
    assert breakdown.model_dump(mode="json")["cost"] == "0.0000000000"
    assert precise("10040.0000000000", 0, 0, 0, 0).model_dump(mode="json") == {
        "cost": "10040.0000000000",
        "currency": "CNY",
        "cost_source": "custom_pricing",
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_hit_tokens": 0,
        "cache_miss_tokens": 0,
        "price_tier": "peak",
        "price_effective_from": "2026-12-01T00:00:00Z",
    }


@pytest.mark.parametrize(
    ("source", "tier", "since"),
    [
        ("custom_pricing", None, None),
        ("all_miss", "peak", None),
        ("none", "peak", PRICES_READ),
        ("litellm_catalog", None, PRICES_READ),
    ],
)
def test_a_breakdown_names_its_price_exactly_when_priced(
    source: CostSource, tier: PriceTier | None, since: datetime | None
) -> None:
    with pytest.raises(ValueError, match=f"cost_source '{source}' needs (both|neither) of price_tier"):
        CostBreakdown(
            cost=Decimal(0),
            cost_source=source,
            input_tokens=0,
            output_tokens=0,
            price_tier=tier,
            price_effective_from=since,
        )
    # Rows stored before dated prices carry "litellm_catalog", without a price: they still validate.
    assert (
        CostBreakdown(cost=Decimal(1), cost_source="litellm_catalog", input_tokens=1, output_tokens=1).price_tier
        is None
    )
