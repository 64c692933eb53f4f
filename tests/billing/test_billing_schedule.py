"""Peak or off-peak: DeepSeek's hours in Beijing time, weekends, statutory holidays from the `holidays` library."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import holidays
import pytest
from tests.billing.price_lists import (
    FLASH_OFF_PEAK,
    FLASH_PEAK,
    PRICES_READ,
    SCHEDULE,
    SHIPPED,
    beijing,
    price_list,
    write,
)

from agent_runtime.engine.billing import ModelPrice, PriceQuote, PriceTier, PricingConfigError, PricingTable


def flash(tier: PriceTier) -> PriceQuote:
    price = FLASH_PEAK if tier == "peak" else FLASH_OFF_PEAK
    return PriceQuote(key="deepseek/deepseek-flash", effective_from=PRICES_READ, tier=tier, price=price)


# Tuesday 2026-12-01 unless said otherwise; `beijing()` gives the instant in UTC, as the service sees it.
@pytest.mark.parametrize(
    ("at", "tier"),
    [
        (beijing(2026, 12, 1, 8, 59, 59), "off_peak"),
        (beijing(2026, 12, 1, 9), "peak"),
        (beijing(2026, 12, 1, 11, 59, 59), "peak"),
        (beijing(2026, 12, 1, 12), "off_peak"),
        (beijing(2026, 12, 1, 13, 59, 59), "off_peak"),
        (beijing(2026, 12, 1, 14), "peak"),
        (beijing(2026, 12, 1, 17, 59, 59), "peak"),
        (beijing(2026, 12, 1, 18), "off_peak"),
        (datetime(2026, 12, 1, 3, 59, 59, 999999, tzinfo=UTC), "peak"),  # 11:59:59.999999
        # The UTC clock and the Beijing clock disagree; Beijing decides.
        (datetime(2026, 12, 1, 1, 30, tzinfo=UTC), "peak"),  # 09:30 Beijing
        (datetime(2026, 12, 1, 10, 30, tzinfo=UTC), "off_peak"),  # 18:30 Beijing, "10:30" in UTC
        (datetime.fromisoformat("2026-12-01T09:30:00+08:00"), "peak"),  # any aware time will do
        (datetime(2026, 12, 4, 16, 30, tzinfo=UTC), "off_peak"),  # Friday in UTC, Saturday 00:30 in Beijing
        # Weekends all day.
        (beijing(2026, 12, 5, 10), "off_peak"),  # Saturday
        (beijing(2026, 12, 6, 15), "off_peak"),  # Sunday
        (beijing(2026, 12, 7, 10), "peak"),  # Monday
        # A statutory holiday on a weekday: New Year's Day 2027 is a Friday.
        (beijing(2027, 1, 1, 10), "off_peak"),
        (beijing(2027, 1, 4, 10), "peak"),  # the Monday after
    ],
)
def test_tier_of_the_shipped_schedule(at: datetime, tier: PriceTier) -> None:
    assert SHIPPED.quote("deepseek-flash", at) == flash(tier)


# A price list whose schedule starts earlier, to look at the 2026 holidays the shipped prices postdate.
HOLIDAY_MODELS = """\
  a/b:
    prices:
      - effective_from: "2026-01-01T00:00:00Z"
        peak: {input_cache_hit: "2", input_cache_miss: "2", output: "2"}
        off_peak: {input_cache_hit: "1", input_cache_miss: "1", output: "1"}
        source: https://example.test/pricing
        read_on: "2026-01-01"
"""
TWO = ModelPrice(input_cache_hit=Decimal(2), input_cache_miss=Decimal(2), output=Decimal(2))
ONE = ModelPrice(input_cache_hit=Decimal(1), input_cache_miss=Decimal(1), output=Decimal(1))


@pytest.mark.parametrize(
    ("at", "tier"),
    [
        (beijing(2026, 10, 1, 10), "off_peak"),  # National Day, a Thursday
        (beijing(2026, 10, 6, 15), "off_peak"),  # a bridging day off (放假调休), a Tuesday
        (beijing(2026, 10, 10, 10), "off_peak"),  # a working Saturday (调休上班): still a weekend for DeepSeek
        (beijing(2026, 10, 9, 10), "peak"),  # the Friday after the holiday
        (beijing(2026, 2, 16, 10), "off_peak"),  # Spring Festival's eve, a Monday
        # Children's Day, a Monday: a half day off for children only (category half_day), not a statutory day off.
        (beijing(2026, 6, 1, 10), "peak"),
    ],
)
def test_statutory_holidays_are_off_peak_all_day(tmp_path: Path, at: datetime, tier: PriceTier) -> None:
    table = PricingTable.load(write(tmp_path, price_list(HOLIDAY_MODELS)))
    assert table.quote("a/b", at) == PriceQuote(
        key="a/b", effective_from=datetime(2026, 1, 1, tzinfo=UTC), tier=tier, price=TWO if tier == "peak" else ONE
    )


def test_the_library_knows_the_2026_days_off() -> None:
    # The State Council's 2026 notice as `holidays` has it: every weekday off, with the bridging days.
    days = holidays.country_holidays("CN", years=2026, categories=("public",))
    assert sorted(days) == [
        date(2026, 1, 1),
        date(2026, 1, 2),
        date(2026, 2, 16),
        date(2026, 2, 17),
        date(2026, 2, 18),
        date(2026, 2, 19),
        date(2026, 2, 20),
        date(2026, 2, 23),
        date(2026, 4, 5),
        date(2026, 4, 6),
        date(2026, 5, 1),
        date(2026, 5, 2),
        date(2026, 5, 4),
        date(2026, 5, 5),
        date(2026, 6, 19),
        date(2026, 9, 25),
        date(2026, 10, 1),
        date(2026, 10, 2),
        date(2026, 10, 3),
        date(2026, 10, 5),
        date(2026, 10, 6),
        date(2026, 10, 7),
    ]


def schedule_with(old: str, new: str) -> str:
    assert old in SCHEDULE
    return SCHEDULE.replace(old, new)


@pytest.mark.parametrize(
    ("schedule", "where", "says"),
    [
        (schedule_with("Asia/Shanghai", "Asia/Beijing"), "schedule.time_zone", "unknown time zone 'Asia/Beijing'"),
        (schedule_with('start: "09:00"', "start: 9:00"), "schedule.peak_windows.0.start", "write the time quoted"),
        (
            schedule_with('end: "12:00"', 'end: "25:00"'),
            "schedule.peak_windows.0.end",
            "Input should be in a valid time",
        ),
        (schedule_with('start: "14:00"', 'start: "19:00"'), "schedule.peak_windows.1", "must be before end"),
        (schedule_with('start: "14:00"', 'start: "11:00"'), "schedule.peak_windows", "window 1 must start at or after"),
        (schedule_with("[monday,", "[funday,"), "schedule.peak_days.0", "Input should be 'monday'"),
        (schedule_with("[monday,", "[monday, monday,"), "schedule.peak_days", "a day is listed twice"),
        (
            schedule_with("country: CN", "country: XX"),
            "schedule.holidays",
            "holidays library: Country XX not available",
        ),
        (schedule_with("[public]", "[statutory]"), "schedule.holidays", "Category is not supported: statutory"),
        (schedule_with("  time_zone: Asia/Shanghai\n", ""), "schedule.time_zone", "Field required"),
        (
            schedule_with('effective_from: "2026-01-01T00:00:00Z"', 'effective_from: "2026-01-01"'),
            "schedule.effective_from",
            "Input should have timezone info",
        ),
    ],
)
def test_an_invalid_schedule_names_the_key(tmp_path: Path, schedule: str, where: str, says: str) -> None:
    path = write(tmp_path, price_list("  {}\n", schedule=schedule))
    with pytest.raises(PricingConfigError) as caught:
        PricingTable.load(path)
    assert caught.value.message.startswith(f"{path}: {where}: ")
    assert says in caught.value.message
    assert "\n" not in caught.value.message
