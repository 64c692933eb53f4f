"""Fallback chains (config/models.yaml) on LiteLLM's Router: where a call goes once its own model kept refusing it.

`LLMClient` retries the call's model itself first (its retries are tied to what reached the client, which the
Router cannot know), and only then hands the call to the Router of that model's chain: one deployment per chain
member, the Router's `fallbacks` walking them in order. The Router does not retry (`num_retries=0`): `LLMClient`
retries each walk of the chain with its own backoff and Retry-After handling (LLM_RETRY_* settings), as it retried
the model. Cooldowns are off: the Router's cooldown would take a member out for every run of the process after a
few 429s of other runs, where each call should get its own chance.

The Router is used only on this path, never for a model's first attempts: it wraps every streamed response in
its own stream (`router_rust/invoke/streaming.py`), at several times the CPU of the provider iterator
`LLMClient` reads, which would be most of an agent run's CPU (docs/benchmarks.md, "LLM overhead").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_runtime.engine.llm.call_builder import CallBuilder, CallTarget, model_id_for_litellm
from agent_runtime.engine.llm.catalog import ModelCatalog
from agent_runtime.engine.llm.litellm_import import load_litellm

# Keys of the primary's call that describe its deployment, or LiteLLM's own retries: the Router supplies both.
_DEPLOYMENT_KEYS = frozenset({"model", "api_key", "api_base", "num_retries"})
# The Router names the deployment group that answered in this response header (LiteLLM's hidden params).
_MODEL_GROUP_HEADER = "x-litellm-model-group"


class FallbackAnswer(BaseModel):
    """The Router's response (or stream) and the chain member that gave it."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    model: str
    raw: Any


class FallbackChains:
    def __init__(self, catalog: ModelCatalog, builder: CallBuilder) -> None:
        self._catalog = catalog
        self._builder = builder
        self._routers: dict[str, Any] = {}
        self._targets: dict[str, list[CallTarget]] = {}

    def chain(self, model: str) -> list[CallTarget]:
        """Where a call to `model` falls back to, in order (empty: nowhere)."""
        cached = self._targets.get(model)
        if cached is None:
            cached = self._targets[model] = [
                self._builder.target(model_id_for_litellm(t.model), api_base=t.api_base)
                for t in self._catalog.chain(model)
            ]
        return cached

    async def acompletion(self, model: str, kwargs: dict[str, Any]) -> FallbackAnswer:
        """The call (the primary's `litellm.acompletion` kwargs) on `model`'s chain; raises what the last member
        raised when none answers."""
        chain = self.chain(model)
        call = {key: value for key, value in kwargs.items() if key not in _DEPLOYMENT_KEYS}
        raw = await self._router(model, chain).acompletion(model=chain[0].model, **call)
        hidden = getattr(raw, "_hidden_params", None) or {}
        answered = (hidden.get("additional_headers") or {}).get(_MODEL_GROUP_HEADER) or chain[0].model
        return FallbackAnswer(model=str(answered), raw=raw)

    def _router(self, model: str, chain: list[CallTarget]) -> Any:
        router = self._routers.get(model)
        if router is None:
            names = [target.model for target in chain]
            router = self._routers[model] = load_litellm().Router(
                model_list=[{"model_name": target.model, "litellm_params": _deployment(target)} for target in chain],
                fallbacks=[{names[0]: names[1:]}] if len(names) > 1 else [],
                num_retries=0,
                disable_cooldowns=True,
            )
        return router


def _deployment(target: CallTarget) -> dict[str, Any]:
    params: dict[str, Any] = {"model": target.model, "max_retries": 0}
    if target.api_key is not None:
        params["api_key"] = target.api_key
    if target.api_base is not None:
        params["api_base"] = target.api_base
    return params
