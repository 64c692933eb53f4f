"""Fallback chains (config/models.yaml) on LiteLLM's Router: where a call goes once its own model kept refusing it.

`LLMClient` retries the call's model itself first (its retries are tied to what reached the client, which the
Router cannot know), and only then hands the call to the Router of that model's chain: one deployment per chain
member, the Router's `fallbacks` walking them in order. The Router does not retry (`num_retries=0`): `LLMClient`
retries each walk of the chain with its own backoff and Retry-After handling (LLM_RETRY_* settings), as it retried
the model. Cooldowns are off: the Router's cooldown would take a member out for every run of the process after a
few 429s of other runs, where each call should get its own chance.

A call that carries images falls back only to members in LLM_IMAGE_MODELS: a text-only model would refuse it
(DeepSeek answers 400), so with none left the call fails with its own model's error.

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


class _ChainKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    images: bool


def carries_images(kwargs: dict[str, Any]) -> bool:
    """Whether the call's messages hold an image part (call_builder's `image_url` blocks)."""
    return any(
        isinstance(message.get("content"), list)
        and any(isinstance(part, dict) and part.get("type") == "image_url" for part in message["content"])
        for message in kwargs.get("messages") or ()
    )


class FallbackChains:
    def __init__(self, catalog: ModelCatalog, builder: CallBuilder, *, image_models: frozenset[str]) -> None:
        self._catalog = catalog
        self._builder = builder
        self._image_models = image_models
        self._routers: dict[_ChainKey, Any] = {}
        self._targets: dict[_ChainKey, list[CallTarget]] = {}

    def chain(self, model: str, kwargs: dict[str, Any]) -> list[CallTarget]:
        """Where the call (`litellm.acompletion` kwargs) to `model` falls back to, in order (empty: nowhere)."""
        key = _ChainKey(model=model, images=carries_images(kwargs))
        cached = self._targets.get(key)
        if cached is None:
            cached = self._targets[key] = [
                self._builder.target(model_id_for_litellm(t.model), api_base=t.api_base)
                for t in self._catalog.chain(model)
                if not key.images or t.model in self._image_models
            ]
        return cached

    async def acompletion(self, model: str, kwargs: dict[str, Any]) -> FallbackAnswer:
        """The call (the primary's `litellm.acompletion` kwargs) on `model`'s chain; raises what the last member
        raised when none answers."""
        chain = self.chain(model, kwargs)
        call = {key: value for key, value in kwargs.items() if key not in _DEPLOYMENT_KEYS}
        key = _ChainKey(model=model, images=carries_images(kwargs))
        raw = await self._router(key, chain).acompletion(model=chain[0].model, **call)
        hidden = getattr(raw, "_hidden_params", None) or {}
        answered = (hidden.get("additional_headers") or {}).get(_MODEL_GROUP_HEADER) or chain[0].model
        return FallbackAnswer(model=str(answered), raw=raw)

    def _router(self, key: _ChainKey, chain: list[CallTarget]) -> Any:
        router = self._routers.get(key)
        if router is None:
            names = [target.model for target in chain]
            router = self._routers[key] = load_litellm().Router(
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
