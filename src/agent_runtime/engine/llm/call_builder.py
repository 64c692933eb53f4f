"""Turns an `LLMRequest` into `litellm.acompletion` keyword arguments.

Everything that does not depend on the request (timeouts, provider credentials per model) is computed once
and cached, because this runs on every model call.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent_runtime.engine.llm.errors import LLMAuthError
from agent_runtime.engine.llm.models import LLMRequest, ToolSchema, WireMessage
from agent_runtime.settings import Settings

DEMO_PROVIDER = "demo"
JSON_HINT = "Answer with one JSON object."

_MESSAGES = TypeAdapter(list[WireMessage])
_TOOLS = TypeAdapter(list[ToolSchema])


class CallTarget(BaseModel):
    """Where one model id is sent and with which credentials."""

    model_config = ConfigDict(frozen=True)

    model: str = Field(description="LiteLLM model id, provider-prefixed.")
    api_key: str | None = Field(default=None, repr=False)
    api_base: str | None = None
    is_demo: bool = False


def model_id_for_litellm(model: str) -> str:
    """`deepseek-flash` -> `deepseek/deepseek-flash`; LiteLLM routes on the provider prefix."""
    if "/" not in model and model.startswith("deepseek-"):
        return f"deepseek/{model}"
    return model


def _with_image_parts(message: dict[str, Any]) -> dict[str, Any]:
    # A user message with images: `content` becomes OpenAI-style blocks, its text first (DeepSeek's vision guide).
    urls = message.pop("images", None)
    if not urls:
        return message
    text = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    return {**message, "content": [*text, *({"type": "image_url", "image_url": {"url": url}} for url in urls)]}


def mentions_json(messages: list[WireMessage]) -> bool:
    return any(m.content is not None and "json" in m.content.lower() for m in messages)


class CallBuilder:
    def __init__(self, settings: Settings) -> None:
        # Only for `httpx.Timeout`, the timeout type LiteLLM takes (connect vs read); no request is made
        # with httpx here. Imported late: heavy, and needed only once a client exists.
        import httpx

        self.settings = settings
        self.timeout = httpx.Timeout(settings.llm_timeout_seconds, connect=settings.llm_connect_timeout_seconds)
        self._targets: dict[tuple[str, str | None], CallTarget] = {}
        self._provider_keys = {
            "deepseek": settings.deepseek_api_key,
            "openai": settings.openai_api_key,
        }

    def target(self, model: str | None, *, api_base: str | None = None) -> CallTarget:
        """Where calls to `model` go (None: the configured model); `api_base` overrides LLM_API_BASE."""
        requested = model or self.settings.effective_llm_model
        key = (requested, api_base)
        cached = self._targets.get(key)
        if cached is None:
            cached = self._targets[key] = self._resolve(requested, api_base)
        return cached

    def _resolve(self, requested: str, api_base: str | None) -> CallTarget:
        model = model_id_for_litellm(requested)
        provider = model.split("/", 1)[0]
        if provider == DEMO_PROVIDER:
            from agent_runtime.engine.llm.demo.provider import ensure_demo_provider

            ensure_demo_provider()
            return CallTarget(model=model, is_demo=True)
        secret = self._provider_keys.get(provider)
        if provider in self._provider_keys and secret is None:
            raise LLMAuthError(f"No API key is configured for the model provider {provider!r}.")
        api_key = secret.get_secret_value() if secret is not None else None
        return CallTarget(model=model, api_key=api_key, api_base=api_base or self.settings.llm_api_base)

    def kwargs(self, request: LLMRequest, target: CallTarget, *, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [
            _with_image_parts(m) for m in _MESSAGES.dump_python(request.messages, exclude_none=True)
        ]
        if request.json_mode and not mentions_json(request.messages):
            # DeepSeek rejects json_object unless the prompt itself asks for JSON.
            messages.append({"role": "system", "content": JSON_HINT})
        kwargs: dict[str, Any] = {
            "model": target.model,
            "messages": messages,
            "timeout": self.timeout,
            # Ours is the only retry loop: LiteLLM's and the OpenAI SDK's would multiply attempts and hide them.
            "num_retries": 0,
            "max_retries": 0,
        }
        if target.api_key is not None:
            kwargs["api_key"] = target.api_key
        if target.api_base is not None:
            kwargs["api_base"] = target.api_base
        if request.tools:
            kwargs["tools"] = _TOOLS.dump_python(request.tools, exclude_none=True)
        if request.tool_choice is not None:
            choice = request.tool_choice
            kwargs["tool_choice"] = choice if isinstance(choice, str) else choice.model_dump()
        if request.json_mode:
            # Never json_schema: DeepSeek answers it with HTTP 400.
            kwargs["response_format"] = {"type": "json_object"}
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        kwargs.update(self.provider_options(request, target))
        if stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    @staticmethod
    def provider_options(request: LLMRequest, target: CallTarget) -> dict[str, Any]:
        """Thinking and the end user's id, as each provider takes them (LiteLLM maps DeepSeek's `thinking` and
        `reasoning_effort`, api-docs.deepseek.com/guides/thinking_mode; DeepSeek's `user_id` is not an OpenAI
        parameter, so it goes in the body as is)."""
        options: dict[str, Any] = {}
        provider = target.model.split("/", 1)[0]
        if target.is_demo:
            return options
        thinks = request.thinking is True
        if provider == "deepseek":
            if request.thinking is not None:
                options["thinking"] = {"type": "enabled" if thinks else "disabled"}
            if request.end_user is not None:
                options["extra_body"] = {"user_id": request.end_user}
        elif request.end_user is not None and provider == "openai":
            options["user"] = request.end_user
        if thinks and request.reasoning_effort is not None:
            options["reasoning_effort"] = request.reasoning_effort
        return options

    def secrets(self) -> list[str]:
        return [s.get_secret_value() for s in self._provider_keys.values() if s is not None]
