"""Loading config/pricing.yaml: the shipped prices, the entry in force at an instant, names, and errors that
name the file and key on one line."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path

import pytest
from tests.billing.price_lists import (
    CHAT,
    CHAT_READ,
    CITED,
    DEMO_SINCE,
    FLASH_OFF_PEAK,
    FLASH_PEAK,
    FREE,
    PRICES_READ,
    PRO_OFF_PEAK,
    PRO_PEAK,
    SCHEDULE,
    SHIPPED,
    beijing,
    price_list,
    write,
)

from agent_runtime.engine.billing import (
    HolidayCalendar,
    ModelPrice,
    ModelPricing,
    PeakSchedule,
    PeakWindow,
    PriceEntry,
    PriceQuote,
    PriceTier,
    PricingConfigError,
    PricingFile,
    PricingTable,
)
from agent_runtime.resources import default_config_dir
from agent_runtime.settings import Settings

DEEPSEEK_PAGE = "https://api-docs.deepseek.com/zh-cn/quick_start/pricing"


def test_shipped_price_list_is_deepseeks_page_of_2026_12_01() -> None:
    table = PricingTable.load(Settings(_env_file=None).pricing_file)  # type: ignore[call-arg]

    def tiered(peak: ModelPrice, off_peak: ModelPrice) -> PriceEntry:
        return PriceEntry(
            effective_from=PRICES_READ, peak=peak, off_peak=off_peak, source=DEEPSEEK_PAGE, read_on=date(2026, 12, 1)
        )

    assert table.pricing == PricingFile(
        currency="CNY",
        schedule=PeakSchedule(
            effective_from=PRICES_READ,
            time_zone="Asia/Shanghai",
            peak_days=("monday", "tuesday", "wednesday", "thursday", "friday"),
            peak_windows=(PeakWindow(start=time(9), end=time(12)), PeakWindow(start=time(14), end=time(18))),
            holidays=HolidayCalendar(country="CN", categories=("public",)),
            source=DEEPSEEK_PAGE,
            read_on=date(2026, 12, 1),
        ),
        models={
            "deepseek/deepseek-flash": ModelPricing(
                aliases=(
                    "deepseek-flash",
                    "deepseek/deepseek-v4-flash",
                    "deepseek-v4-flash",
                    "deepseek/deepseek-v4-flash-vision-exp",
                    "deepseek-v4-flash-vision-exp",
                ),
                prices=(tiered(FLASH_PEAK, FLASH_OFF_PEAK),),
            ),
            "deepseek/deepseek-v4-pro": ModelPricing(
                aliases=("deepseek-v4-pro",), prices=(tiered(PRO_PEAK, PRO_OFF_PEAK),)
            ),
            "deepseek/deepseek-chat": ModelPricing(
                aliases=("deepseek-chat",),
                retired_at=datetime(2026, 7, 24, 15, 59, tzinfo=UTC),
                prices=(
                    PriceEntry(effective_from=CHAT_READ, standard=CHAT, source=DEEPSEEK_PAGE, read_on=date(2026, 3, 6)),
                ),
            ),
            "demo/agent": ModelPricing(prices=(PriceEntry(effective_from=DEMO_SINCE, standard=FREE),)),
        },
    )


def flash(tier: PriceTier, price: ModelPrice) -> PriceQuote:
    return PriceQuote(key="deepseek/deepseek-flash", effective_from=PRICES_READ, tier=tier, price=price)


PEAK = beijing(2026, 12, 1, 10)  # Tuesday 10:00
OFF_PEAK = beijing(2026, 12, 1, 12, 30)  # Tuesday 12:30, the lunch break


@pytest.mark.parametrize(
    ("model", "at", "expected"),
    [
        *[
            (name, PEAK, flash("peak", FLASH_PEAK))
            for name in (
                "deepseek/deepseek-flash",
                "deepseek-flash",
                "deepseek/deepseek-v4-flash",
                "deepseek-v4-flash",
                "deepseek/deepseek-v4-flash-vision-exp",
                "deepseek-v4-flash-vision-exp",
            )
        ],
        ("deepseek-v4-flash", OFF_PEAK, flash("off_peak", FLASH_OFF_PEAK)),
        (
            "deepseek-v4-pro",
            PEAK,
            PriceQuote(key="deepseek/deepseek-v4-pro", effective_from=PRICES_READ, tier="peak", price=PRO_PEAK),
        ),
        (
            "deepseek/deepseek-v4-pro",
            OFF_PEAK,
            PriceQuote(key="deepseek/deepseek-v4-pro", effective_from=PRICES_READ, tier="off_peak", price=PRO_OFF_PEAK),
        ),
        # The retired model, while it was served: its flat price, whatever the hour.
        (
            "deepseek-chat",
            beijing(2026, 6, 1, 10),
            PriceQuote(key="deepseek/deepseek-chat", effective_from=CHAT_READ, tier="standard", price=CHAT),
        ),
        (
            "deepseek-chat",
            datetime(2026, 7, 24, 15, 58, 59, tzinfo=UTC),
            PriceQuote(key="deepseek/deepseek-chat", effective_from=CHAT_READ, tier="standard", price=CHAT),
        ),
        (
            "demo/agent",
            PEAK,
            PriceQuote(key="demo/agent", effective_from=DEMO_SINCE, tier="standard", price=FREE),
        ),
        # No price in force: retired, before the first entry, or no row at all.
        ("deepseek-chat", datetime(2026, 7, 24, 15, 59, tzinfo=UTC), None),
        ("deepseek/deepseek-chat", PEAK, None),
        ("deepseek-chat", datetime(2026, 3, 5, 23, 59, 59, tzinfo=UTC), None),
        ("deepseek-flash", datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC), None),
        ("deepseek-reasoner", PEAK, None),
        ("openai/gpt-4o", PEAK, None),
    ],
)
def test_quote_of_the_shipped_list(model: str, at: datetime, expected: PriceQuote | None) -> None:
    assert SHIPPED.quote(model, at) == expected


def test_a_price_change_mid_day_applies_from_its_instant(tmp_path: Path) -> None:
    models = """\
  a/b:
    prices:
      - effective_from: "2026-01-01T00:00:00Z"
        standard: {input_cache_hit: "1", input_cache_miss: "1", output: "1"}
        source: https://example.test/pricing
        read_on: "2026-01-01"
      - effective_from: "2026-12-02T04:00:00Z"
        standard: {input_cache_hit: "2", input_cache_miss: "2", output: "2"}
        source: https://example.test/pricing
        read_on: "2026-01-01"
"""
    table = PricingTable.load(write(tmp_path, price_list(models)))
    old = ModelPrice(input_cache_hit=Decimal(1), input_cache_miss=Decimal(1), output=Decimal(1))
    new = ModelPrice(input_cache_hit=Decimal(2), input_cache_miss=Decimal(2), output=Decimal(2))
    changed = datetime(2026, 12, 2, 4, tzinfo=UTC)
    assert [table.quote("a/b", at) for at in (beijing(2026, 12, 2, 11, 59, 59), beijing(2026, 12, 2, 12))] == [
        PriceQuote(key="a/b", effective_from=datetime(2026, 1, 1, tzinfo=UTC), tier="standard", price=old),
        PriceQuote(key="a/b", effective_from=changed, tier="standard", price=new),
    ]


def test_quote_entry_finds_a_stored_entry_and_tier_only() -> None:
    assert SHIPPED.quote_entry("deepseek-v4-flash", PRICES_READ, "off_peak") == flash("off_peak", FLASH_OFF_PEAK)
    assert SHIPPED.quote_entry("deepseek-chat", CHAT_READ, "standard") == PriceQuote(
        key="deepseek/deepseek-chat", effective_from=CHAT_READ, tier="standard", price=CHAT
    )
    assert SHIPPED.quote_entry("deepseek-flash", PRICES_READ, "standard") is None
    assert SHIPPED.quote_entry("deepseek-flash", CHAT_READ, "peak") is None
    assert SHIPPED.quote_entry("openai/gpt-4o", PRICES_READ, "peak") is None


def test_a_naive_time_is_refused_rather_than_read_in_the_servers_zone() -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        SHIPPED.quote("deepseek-flash", datetime(2026, 12, 1, 10))


def test_unquoted_numbers_and_timestamps_are_read_as_written(tmp_path: Path) -> None:
    models = """\
  a/b:
    prices:
      - effective_from: 2026-01-01T00:00:00Z
        standard: {input_cache_hit: 0.1, input_cache_miss: 0.3, output: 7}
        source: https://example.test/pricing
        read_on: "2026-01-01"
"""
    entry = PricingTable.load(write(tmp_path, price_list(models))).pricing.models["a/b"].prices[0]
    assert entry == PriceEntry(
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        standard=ModelPrice(input_cache_hit=Decimal("0.1"), input_cache_miss=Decimal("0.3"), output=Decimal(7)),
        source="https://example.test/pricing",
        read_on=date(2026, 1, 1),
    )


FLAT = '{input_cache_hit: "1", input_cache_miss: "1", output: "1"}'


def standard(price: str) -> str:
    return f'effective_from: "2026-02-01T00:00:00Z", standard: {{{price}}}, {CITED}'


def one_entry(entry: str, *, extra: str = "") -> str:
    return price_list(f"  a/b:\n{extra}    prices:\n      - {{{entry}}}\n")


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        # Tiers.
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00Z", peak: {FLAT}, {CITED}'),
            "models.a/b.prices.0",
            "missing off_peak",
        ),
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00Z", off_peak: {FLAT}, {CITED}'),
            "models.a/b.prices.0",
            "missing peak",
        ),
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00Z", {CITED}'),
            "models.a/b.prices.0",
            "missing standard, or peak and off_peak",
        ),
        (
            one_entry(
                f'effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}, peak: {FLAT}, off_peak: {FLAT}, {CITED}'
            ),
            "models.a/b.prices.0",
            "not both",
        ),
        # Prices.
        (
            one_entry(standard("input_cache_hit: 1, input_cache_miss: 1, output: cheap")),
            "models.a/b.prices.0.standard.output",
            "Input should be a valid decimal",
        ),
        (
            one_entry(standard("input_cache_hit: 1, input_cache_miss: 1")),
            "models.a/b.prices.0.standard.output",
            "Field required",
        ),
        (
            one_entry(standard("input_cache_hit: -1, input_cache_miss: 1, output: 1")),
            "models.a/b.prices.0.standard.input_cache_hit",
            "greater than or equal to 0",
        ),
        (
            one_entry(standard("input_cache_hit: 1, input_cache_miss: 1, output: 1, typo: 2")),
            "models.a/b.prices.0.standard.typo",
            "Extra inputs are not permitted",
        ),
        # Times.
        (one_entry(f"standard: {FLAT}, {CITED}"), "models.a/b.prices.0.effective_from", "Field required"),
        (
            one_entry(f'effective_from: "2026-02-30T00:00:00Z", standard: {FLAT}, {CITED}'),
            "models.a/b.prices.0.effective_from",
            "Input should be a valid datetime",
        ),
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00", standard: {FLAT}, {CITED}'),
            "models.a/b.prices.0.effective_from",
            "Input should have timezone info",
        ),
        (
            one_entry(f'effective_from: "2026-02-01T08:00:00+08:00", standard: {FLAT}, {CITED}'),
            "models.a/b.prices.0.effective_from",
            "must be in UTC",
        ),
        (
            price_list(
                "  a/b:\n    prices:\n"
                f'      - {{effective_from: "2026-03-01T00:00:00Z", standard: {FLAT}, {CITED}}}\n'
                f'      - {{effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}, {CITED}}}\n'
            ),
            "models.a/b.prices",
            "entry 1 (effective_from 2026-02-01T00:00:00+00:00) must be later than entry 0",
        ),
        (
            price_list(
                "  a/b:\n    prices:\n"
                f'      - {{effective_from: "2026-03-01T00:00:00Z", standard: {FLAT}, {CITED}}}\n'
                f'      - {{effective_from: "2026-03-01T00:00:00Z", standard: {FLAT}, {CITED}}}\n'
            ),
            "models.a/b.prices",
            "one per instant",
        ),
        (price_list("  a/b:\n    prices: []\n"), "models.a/b.prices", "at least 1 item"),
        (
            one_entry(
                f'effective_from: "2026-03-01T00:00:00Z", standard: {FLAT}, {CITED}',
                extra='    retired_at: "2026-03-01T00:00:00Z"\n',
            ),
            "models.a/b",
            "retired_at must be later than the last entry's effective_from",
        ),
        # Sources.
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}'),
            "models.a/b.prices.0",
            "needs its source",
        ),
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}, source: https://example.test/p'),
            "models.a/b.prices.0",
            "source and read_on go together",
        ),
        (
            one_entry(
                f'effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}, source: the website, read_on: "2026-01-01"'
            ),
            "models.a/b.prices.0.source",
            "String should match pattern",
        ),
        (
            one_entry(f'effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}, {CITED}, typo: 1'),
            "models.a/b.prices.0.typo",
            "Extra inputs are not permitted",
        ),
        # The file.
        ("currency: USD\n" + SCHEDULE + "models: {}\n", "currency", "Input should be 'CNY'"),
        ("currency: CNY\nmodels: {}\n", "schedule", "Field required"),
    ],
)
def test_invalid_entries_name_the_file_and_key_on_one_line(tmp_path: Path, text: str, where: str, says: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PricingConfigError) as caught:
        PricingTable.load(path)
    assert caught.value.message.startswith(f"{path}: {where}: ")
    assert says in caught.value.message
    assert "\n" not in caught.value.message


def test_a_tiered_entry_older_than_the_schedule_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, one_entry(f'effective_from: "2025-12-31T00:00:00Z", peak: {FLAT}, off_peak: {FLAT}, {CITED}')
    )
    with pytest.raises(PricingConfigError) as caught:
        PricingTable.load(path)
    assert caught.value.message == (
        f"{path}: models.a/b.prices.0: peak/off_peak prices from 2025-12-31T00:00:00+00:00 predate "
        "schedule.effective_from (2026-01-01T00:00:00+00:00): the peak hours then are not known"
    )


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ("aliases: [shared]", "aliases: [shared]", "models.a/two: name 'shared' is already used by models.a/one"),
        ("aliases: [a/two]", "aliases: []", "models.a/two: name 'a/two' is already used by models.a/one"),
        ("aliases: [same, same]", "aliases: []", "models.a/one: name 'same' is already used by models.a/one"),
    ],
)
def test_a_name_used_twice_is_refused(tmp_path: Path, first: str, second: str, message: str) -> None:
    entry = f'prices: [{{effective_from: "2026-02-01T00:00:00Z", standard: {FLAT}, {CITED}}}]'
    path = write(tmp_path, price_list(f"  a/one: {{{first}, {entry}}}\n  a/two: {{{second}, {entry}}}\n"))
    with pytest.raises(PricingConfigError) as caught:
        PricingTable.load(path)
    assert caught.value.message == f"{path}: {message}"


def test_unreadable_or_malformed_files_name_the_file_on_one_line(tmp_path: Path) -> None:
    with pytest.raises(PricingConfigError, match=r"missing\.yaml: cannot read"):
        PricingTable.load(tmp_path / "missing.yaml")
    with pytest.raises(PricingConfigError) as caught:
        PricingTable.load(write(tmp_path, "models: [unclosed\n"))
    assert caught.value.message.startswith(f"{tmp_path / 'pricing.yaml'}: cannot read price table: while parsing")
    assert "\n" not in caught.value.message


def test_project_root_points_at_the_shipped_file() -> None:
    assert (default_config_dir() / "pricing.yaml").is_file()
