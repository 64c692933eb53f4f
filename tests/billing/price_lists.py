"""Price lists for billing tests: the shipped file, and small YAML ones written to a temporary directory."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from agent_runtime.engine.billing import LLMUsage, ModelPrice, ModelPricing, PriceEntry, PricingFile, PricingTable
from agent_runtime.resources import default_config_dir

SHIPPED = PricingTable.load(default_config_dir() / "pricing.yaml")
BEIJING = timezone(timedelta(hours=8))

# DeepSeek's page, read 2026-12-01: cache hit / cache miss / output, CNY per million tokens.
FLASH_PEAK = ModelPrice(input_cache_hit=Decimal("0.04"), input_cache_miss=Decimal(2), output=Decimal(8))
FLASH_OFF_PEAK = ModelPrice(input_cache_hit=Decimal("0.02"), input_cache_miss=Decimal(1), output=Decimal(4))
PRO_PEAK = ModelPrice(input_cache_hit=Decimal("0.30"), input_cache_miss=Decimal(9), output=Decimal(27))
PRO_OFF_PEAK = ModelPrice(input_cache_hit=Decimal("0.15"), input_cache_miss=Decimal("4.5"), output=Decimal("13.5"))
CHAT = ModelPrice(input_cache_hit=Decimal("0.2"), input_cache_miss=Decimal(2), output=Decimal(3))
FREE = ModelPrice(input_cache_hit=Decimal(0), input_cache_miss=Decimal(0), output=Decimal(0))
PRICES_READ = datetime(2026, 12, 1, tzinfo=UTC)
CHAT_READ = datetime(2026, 3, 6, tzinfo=UTC)
DEMO_SINCE = datetime(2000, 1, 1, tzinfo=UTC)

SCHEDULE = """\
schedule:
  effective_from: "2026-01-01T00:00:00Z"
  time_zone: Asia/Shanghai
  peak_days: [monday, tuesday, wednesday, thursday, friday]
  peak_windows:
    - {start: "09:00", end: "12:00"}
    - {start: "14:00", end: "18:00"}
  holidays: {country: CN, categories: [public]}
  source: https://example.test/pricing
  read_on: "2026-01-01"
"""
CITED = 'source: https://example.test/pricing, read_on: "2026-01-01"'


def beijing(year: int, month: int, day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    """An instant given as Beijing wall-clock time, expressed in UTC (as the service has it)."""
    return datetime(year, month, day, hour, minute, second, tzinfo=BEIJING).astimezone(UTC)


def usage(prompt: int, completion: int, hit: int | None = None, miss: int | None = None) -> LLMUsage:
    return LLMUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
    )


def price_list(models: str, *, schedule: str = SCHEDULE) -> str:
    """A whole file: `models` is the YAML under `models:`, indented by two spaces."""
    return f"currency: CNY\n{schedule}models:\n{models}"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pricing.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def flat(amount: str) -> ModelPrice:
    return ModelPrice(input_cache_hit=Decimal(amount), input_cache_miss=Decimal(amount), output=Decimal(amount))


def cited(effective_from: datetime, standard: ModelPrice) -> PriceEntry:
    return PriceEntry(
        effective_from=effective_from,
        standard=standard,
        source="https://example.test/pricing",
        read_on=date(2026, 1, 1),
    )


def table_of(model: str, *entries: PriceEntry) -> PricingTable:
    """One model's flat entries, with the shipped schedule."""
    models = {model: ModelPricing(prices=entries)}
    return PricingTable(PricingFile(currency="CNY", schedule=SHIPPED.pricing.schedule, models=models))
