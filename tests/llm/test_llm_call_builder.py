"""What LLMClient hands to litellm.acompletion, checked without a network."""

from __future__ import annotations

import httpx
import pytest

from agent_runtime.engine.llm import LLMAuthError, LLMRequest, NamedFunction, NamedToolChoice, WireMessage
from agent_runtime.engine.llm.call_builder import JSON_HINT, CallBuilder, CallTarget, model_id_for_litellm
from agent_runtime.settings import Settings


def settings(**values: object) -> Settings:
    defaults: dict[str, object] = {"llm_model": None, "deepseek_api_key": None, "openai_api_key": None}
    return Settings(_env_file=None, **{**defaults, **values})  # type: ignore[arg-type]


def test_model_ids_get_the_provider_prefix_litellm_routes_on() -> None:
    assert model_id_for_litellm("deepseek-flash") == "deepseek/deepseek-flash"
    assert model_id_for_litellm("deepseek/deepseek-flash") == "deepseek/deepseek-flash"
    assert model_id_for_litellm("demo/agent") == "demo/agent"


def test_target_carries_key_and_base_and_is_cached() -> None:
    builder = CallBuilder(settings(deepseek_api_key="sk-abc", llm_api_base="http://127.0.0.1:9"))
    target = builder.target("deepseek-flash")
    assert target == CallTarget(model="deepseek/deepseek-flash", api_key="sk-abc", api_base="http://127.0.0.1:9")
    assert builder.target("deepseek-flash") is target
    assert "sk-abc" not in repr(target)


def test_default_model_without_any_key_is_the_demo() -> None:
    assert CallBuilder(settings()).target(None) == CallTarget(model="demo/agent", is_demo=True)


def test_a_provider_without_its_key_is_refused() -> None:
    with pytest.raises(LLMAuthError, match="'deepseek'"):
        CallBuilder(settings()).target("deepseek/deepseek-flash")


def test_kwargs_whole_payload() -> None:
    builder = CallBuilder(settings(deepseek_api_key="sk-abc", llm_timeout_seconds=30, llm_connect_timeout_seconds=3))
    request = LLMRequest(
        messages=[WireMessage(role="user", content="hi")],
        json_mode=True,
        tool_choice=NamedToolChoice(function=NamedFunction(name="calculator")),
        max_tokens=10,
    )
    kwargs = builder.kwargs(request, builder.target("deepseek-flash"), stream=True)
    assert kwargs == {
        "model": "deepseek/deepseek-flash",
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": JSON_HINT}],
        "timeout": httpx.Timeout(30, connect=3),
        "num_retries": 0,
        "max_retries": 0,
        "api_key": "sk-abc",
        "tool_choice": {"type": "function", "function": {"name": "calculator"}},
        "response_format": {"type": "json_object"},
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert request.messages == [WireMessage(role="user", content="hi")]
