"""The models a configuration can call, checked at start-up: each needs a price in force, or budgets would
never count its calls (a model without one is recorded at 0 CNY: free and unlimited), and an id LiteLLM does
not know for its provider is most likely a typo (`deepseek/deepseek-flsh`), which it only reports at the
first call."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from agent_runtime.engine.billing.pricing import PricingConfigError, PricingTable
from agent_runtime.engine.flow.templates import TASKS_FILE, FlowTemplates
from agent_runtime.engine.llm.call_builder import DEMO_PROVIDER, model_id_for_litellm
from agent_runtime.engine.llm.catalog import ModelCatalog
from agent_runtime.settings import Settings


class ConfiguredModel(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    where: str


def configured_models(settings: Settings, templates: FlowTemplates, catalog: ModelCatalog) -> list[ConfiguredModel]:
    """Every model a call may go to: LLM_MODEL (or its default), each task's, and their fallbacks, first mention."""
    found: dict[str, ConfiguredModel] = {}

    def add(model: str, where: str) -> None:
        model = model_id_for_litellm(model)
        if model in found:
            return
        found[model] = ConfiguredModel(model=model, where=where)
        for target in catalog.chain(model):
            add(target.model, f"{catalog.source}: fallback of {model}")

    add(settings.effective_llm_model, "LLM_MODEL")
    for name in templates.tasks():
        add(templates.call_options(name, settings).model, f"{TASKS_FILE}: {name}.model")
    return list(found.values())


def refuse_unpriced(models: list[ConfiguredModel], pricing: PricingTable, settings: Settings) -> None:
    """Raise PricingConfigError naming the first model with no price in force now, unless the operator set
    UNPRICED_MODEL_PRICE_CNY."""
    if settings.unpriced_model_price_cny is not None:
        return
    now = datetime.now(UTC)
    for configured in models:
        if pricing.listed_quote(configured.model, now) is None:
            raise PricingConfigError(
                f"{configured.where}: {configured.model} has no price in force in {pricing.source}; add one, "
                "or set UNPRICED_MODEL_PRICE_CNY (CNY per million tokens) for budgets to count its calls"
            )


def unknown_model_warnings(models: list[ConfiguredModel], pricing: PricingTable) -> list[str]:
    """One line per model id LiteLLM does not know for its provider, naming the ids it knows there. Only models
    our price list does not name are looked up: a priced one was configured on purpose, and so the shipped
    configuration does not load LiteLLM (~2.5 s, ~100 MB) into `serve`'s parent process."""
    now = datetime.now(UTC)
    unlisted = [configured for configured in models if pricing.listed_quote(configured.model, now) is None]
    if not unlisted:
        return []
    from agent_runtime.engine.llm.litellm_import import load_litellm

    litellm = load_litellm()
    lines: list[str] = []
    for configured in unlisted:
        provider, _, name = configured.model.partition("/")
        known = litellm.models_by_provider.get(provider)
        if provider == DEMO_PROVIDER or not name or not known:
            continue
        if configured.model in known or name in known:
            continue
        ids = sorted({k if "/" in k else f"{provider}/{k}" for k in known})
        lines.append(f"{configured.where}: LiteLLM does not know {configured.model}; it knows {', '.join(ids)}")
    return lines
