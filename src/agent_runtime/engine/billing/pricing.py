"""The CNY price table (`config/pricing.yaml`): loading, validation and model lookup."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_runtime.engine.errors import AppError


class PricingConfigError(AppError):
    code = "pricing_config_error"


class ModelPrice(BaseModel):
    """CNY per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_cache_hit: Decimal = Field(ge=0)
    input_cache_miss: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    aliases: tuple[str, ...] = ()

    @field_validator("input_cache_hit", "input_cache_miss", "output", mode="before")
    @classmethod
    def _float_via_text(cls, value: object) -> object:
        # An unquoted YAML number arrives as a binary float; its shortest repr ("0.2") is what the author wrote.
        return repr(value) if isinstance(value, float) else value

    @property
    def cache_split_matters(self) -> bool:
        return self.input_cache_hit != self.input_cache_miss


class PricingFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: Literal["CNY"]
    models: dict[str, ModelPrice]


class PricedModel(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str = Field(description="The table key (canonical LiteLLM model id) the lookup resolved to.")
    price: ModelPrice


class PricingTable:
    def __init__(self, pricing: PricingFile, *, source: str = "<memory>") -> None:
        self.pricing = pricing
        self.source = source
        self._index: dict[str, PricedModel] = {}
        for key, price in pricing.models.items():
            for name in (key, *price.aliases):
                if name in self._index:
                    clash = self._index[name].key
                    raise PricingConfigError(f"{source}: models.{key}: name {name!r} is already used by models.{clash}")
                self._index[name] = PricedModel(key=key, price=price)

    @classmethod
    def load(cls, path: Path) -> PricingTable:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise PricingConfigError(f"{path}: cannot read price table: {exc}") from exc
        try:
            pricing = PricingFile.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "<root>"
            raise PricingConfigError(f"{path}: {where}: {first['msg']}") from exc
        return cls(pricing, source=str(path))

    def lookup(self, model: str) -> PricedModel | None:
        return self._index.get(model)
