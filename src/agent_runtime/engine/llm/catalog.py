"""`config/models.yaml`: model ids that are retired, and the fallback chain of each model. Validated at start-up."""

from __future__ import annotations

from pathlib import Path

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from agent_runtime.engine.config_file import load_yaml_model


class ModelConfigError(ValueError):
    """models.yaml is invalid, or a configured model id is retired; the message names the file or setting."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetiredModel(_Frozen):
    model: str = Field(min_length=1, description="The LiteLLM id the provider no longer serves.")
    aliases: tuple[str, ...] = ()
    retired_at: AwareDatetime
    replacement: str = Field(min_length=1, description="What to configure instead, as the start-up error says it.")
    source: str = Field(min_length=1)


class FallbackTarget(_Frozen):
    model: str = Field(min_length=1, description="LiteLLM model id.")
    api_base: str | None = Field(default=None, description="Its endpoint; None: LLM_API_BASE, or the provider's.")


class ModelsFile(_Frozen):
    retired: list[RetiredModel] = Field(default_factory=list)
    fallbacks: dict[str, list[FallbackTarget]] = Field(default_factory=dict)

    @field_validator("fallbacks", mode="before")
    @classmethod
    def _plain_ids(cls, value: object) -> object:
        # `[deepseek/deepseek-v4-pro]` is shorthand for `[{model: deepseek/deepseek-v4-pro}]`.
        if not isinstance(value, dict):
            return value
        return {
            primary: [{"model": item} if isinstance(item, str) else item for item in chain]
            if isinstance(chain, list)
            else chain
            for primary, chain in value.items()
        }


class ModelCatalog:
    def __init__(self, models: ModelsFile, *, source: str = "<memory>") -> None:
        self.models = models
        self.source = source
        self._retired: dict[str, RetiredModel] = {}
        for entry in models.retired:
            for name in (entry.model, *entry.aliases):
                self._retired[name] = entry
        for primary, chain in models.fallbacks.items():
            for index, target in enumerate(chain):
                self.refuse_retired(target.model, f"{source}: fallbacks.{primary}[{index}]")
                if target.model == primary or target.model in [t.model for t in chain[:index]]:
                    raise ModelConfigError(
                        f"{source}: fallbacks.{primary}[{index}]: {target.model} is already in the chain"
                    )

    @classmethod
    def load(cls, path: Path) -> ModelCatalog:
        return cls(load_yaml_model(path, ModelsFile, ModelConfigError, what="model list"), source=str(path))

    def retired(self, model: str) -> RetiredModel | None:
        return self._retired.get(model)

    def refuse_retired(self, model: str, where: str) -> None:
        """Stop start-up with one line when `model` (configured at `where`) is retired."""
        entry = self.retired(model)
        if entry is not None:
            raise ModelConfigError(
                f"{where}: {model} was retired on {entry.retired_at:%Y-%m-%d} ({entry.source}); use {entry.replacement}"
            )

    def chain(self, model: str) -> list[FallbackTarget]:
        """The models a call to `model` falls back to, in order (empty: none)."""
        return list(self.models.fallbacks.get(model, ()))
