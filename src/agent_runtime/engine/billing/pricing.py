"""The CNY price list (`config/pricing.yaml`): loading, validation, and the price in force at an instant.

Prices are data with dates: each model has entries, oldest first, and an entry is in force from its
`effective_from` until the next one (or the model's `retired_at`). An entry has one flat price (tier
`standard`) or a `peak` and an `off_peak` price, chosen by the file's `schedule` (billing/schedule.py).
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_runtime.engine.billing.models import PriceTier
from agent_runtime.engine.billing.schedule import SOURCE_PATTERN, ConfigModel, PeakClock, PeakSchedule, UtcDatetime
from agent_runtime.engine.config_file import load_yaml_model
from agent_runtime.engine.errors import AppError


class PricingConfigError(AppError):
    code = "pricing_config_error"


class ModelPrice(ConfigModel):
    """CNY per million tokens."""

    input_cache_hit: Decimal = Field(ge=0)
    input_cache_miss: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)

    @field_validator("input_cache_hit", "input_cache_miss", "output", mode="before")
    @classmethod
    def _float_via_text(cls, value: object) -> object:
        # An unquoted YAML number arrives as a binary float; its shortest repr ("0.2") is what the author wrote.
        return repr(value) if isinstance(value, float) else value

    @property
    def cache_split_matters(self) -> bool:
        return self.input_cache_hit != self.input_cache_miss

    @property
    def is_free(self) -> bool:
        return not (self.input_cache_hit or self.input_cache_miss or self.output)


class PriceEntry(ConfigModel):
    effective_from: UtcDatetime
    standard: ModelPrice | None = None
    peak: ModelPrice | None = None
    off_peak: ModelPrice | None = None
    source: str | None = Field(default=None, pattern=SOURCE_PATTERN, description="The provider's price page.")
    read_on: date | None = Field(default=None, description="When `source` was read and these prices seen there.")

    @model_validator(mode="after")
    def _complete(self) -> PriceEntry:
        if self.standard is not None and (self.peak is not None or self.off_peak is not None):
            raise ValueError("give either standard or peak and off_peak, not both")
        if self.standard is None and (self.peak is None or self.off_peak is None):
            missing = "off_peak" if self.peak else "peak" if self.off_peak else "standard, or peak and off_peak"
            raise ValueError(f"missing {missing}")
        if (self.source is None) != (self.read_on is None):
            raise ValueError("source and read_on go together: the page and the day it was read")
        if self.source is None and not all(self.price(tier).is_free for tier in self.tiers):
            raise ValueError("a price above zero needs its source and read_on")
        return self

    @property
    def tiers(self) -> tuple[PriceTier, ...]:
        return ("standard",) if self.standard is not None else ("peak", "off_peak")

    def price(self, tier: PriceTier) -> ModelPrice:
        """The price of one of `tiers`."""
        match tier:
            case "standard":
                price = self.standard
            case "peak":
                price = self.peak
            case "off_peak":
                price = self.off_peak
        if price is None:
            raise ValueError(f"the entry effective from {self.effective_from.isoformat()} has no {tier} price")
        return price


class ModelPricing(ConfigModel):
    aliases: tuple[str, ...] = ()
    retired_at: UtcDatetime | None = Field(default=None, description="From then on no price is in force.")
    prices: tuple[PriceEntry, ...] = Field(min_length=1, description="Oldest first.")

    @field_validator("prices")
    @classmethod
    def _oldest_first(cls, value: tuple[PriceEntry, ...]) -> tuple[PriceEntry, ...]:
        # Sorted and unique, so the entry in force at an instant is one bisection away and never ambiguous.
        for index in range(1, len(value)):
            if value[index].effective_from <= value[index - 1].effective_from:
                raise ValueError(
                    f"entry {index} (effective_from {value[index].effective_from.isoformat()}) must be later than "
                    f"entry {index - 1} ({value[index - 1].effective_from.isoformat()}): oldest first, one per instant"
                )
        return value

    @model_validator(mode="after")
    def _retired_after_last_price(self) -> ModelPricing:
        if self.retired_at is not None and self.retired_at <= self.prices[-1].effective_from:
            raise ValueError("retired_at must be later than the last entry's effective_from")
        return self

    def entry_at(self, at: datetime) -> PriceEntry | None:
        if self.retired_at is not None and at >= self.retired_at:
            return None
        index = bisect_right([entry.effective_from for entry in self.prices], at)
        return self.prices[index - 1] if index else None


class PricingFile(ConfigModel):
    currency: Literal["CNY"]
    schedule: PeakSchedule
    models: dict[str, ModelPricing]


class PriceQuote(BaseModel):
    """The price that applies to a call: which model row, which dated entry, which tier."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="The table key (canonical LiteLLM model id) the name resolved to.")
    effective_from: AwareDatetime
    tier: PriceTier
    price: ModelPrice


# The entry a fallback price (UNPRICED_MODEL_PRICE_CNY) is recorded under: older than any dated price.
FALLBACK_EFFECTIVE_FROM = datetime(2000, 1, 1, tzinfo=UTC)


class PricingTable:
    def __init__(
        self, pricing: PricingFile, *, source: str = "<memory>", fallback_per_million: Decimal | None = None
    ) -> None:
        """`fallback_per_million`: the operator's price (input and output alike) for a model with none in force."""
        self.pricing = pricing
        self.source = source
        self._fallback = (
            None
            if fallback_per_million is None
            else ModelPrice(
                input_cache_hit=fallback_per_million,
                input_cache_miss=fallback_per_million,
                output=fallback_per_million,
            )
        )
        self._keys: dict[str, str] = {}
        for key, row in pricing.models.items():
            for name in (key, *row.aliases):
                if name in self._keys:
                    clash = self._keys[name]
                    raise PricingConfigError(f"{source}: models.{key}: name {name!r} is already used by models.{clash}")
                self._keys[name] = key
            for index, entry in enumerate(row.prices):
                if entry.standard is None and entry.effective_from < pricing.schedule.effective_from:
                    raise PricingConfigError(
                        f"{source}: models.{key}.prices.{index}: peak/off_peak prices from "
                        f"{entry.effective_from.isoformat()} predate schedule.effective_from "
                        f"({pricing.schedule.effective_from.isoformat()}): the peak hours then are not known"
                    )
        self._clock = PeakClock(pricing.schedule)

    @classmethod
    def load(cls, path: Path, *, fallback_per_million: Decimal | None = None) -> PricingTable:
        return cls(
            load_yaml_model(path, PricingFile, PricingConfigError, what="price table"),
            source=str(path),
            fallback_per_million=fallback_per_million,
        )

    def listed_quote(self, model: str, at: datetime) -> PriceQuote | None:
        """The price list's own price for `model` at `at`, never the fallback; None when there is none."""
        key = self._keys.get(model)
        if key is None:
            return None
        entry = self.pricing.models[key].entry_at(at)
        if entry is None:
            return None
        tier: PriceTier = "standard" if entry.standard is not None else self._clock.tier_at(at)
        return PriceQuote(key=key, effective_from=entry.effective_from, tier=tier, price=entry.price(tier))

    def quote(self, model: str, at: datetime) -> PriceQuote | None:
        """The price in force for `model` (a key or an alias) at `at`, else the fallback price; None when there
        is neither."""
        if at.tzinfo is None:
            # A naive time would be read in the server's zone: a price tier off by the UTC offset.
            raise ValueError(f"quote needs an aware datetime, got {at.isoformat()}")
        listed = self.listed_quote(model, at)
        if listed is not None or self._fallback is None:
            return listed
        return PriceQuote(key=model, effective_from=FALLBACK_EFFECTIVE_FROM, tier="standard", price=self._fallback)

    def quote_entry(self, model: str, effective_from: datetime, tier: PriceTier) -> PriceQuote | None:
        """The price of one named entry and tier, as a stored cost records them; None when there is none."""
        key = self._keys.get(model)
        if key is None:
            if self._fallback is not None and effective_from == FALLBACK_EFFECTIVE_FROM and tier == "standard":
                return PriceQuote(key=model, effective_from=effective_from, tier=tier, price=self._fallback)
            return None
        for entry in self.pricing.models[key].prices:
            if entry.effective_from == effective_from and tier in entry.tiers:
                return PriceQuote(key=key, effective_from=entry.effective_from, tier=tier, price=entry.price(tier))
        return None
