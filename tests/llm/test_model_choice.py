"""Which model a call goes to, with which thinking and end-user id; retired ids; the fallback chains' file."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import httpx
import pytest
from pydantic import SecretStr

from agent_runtime.engine.llm import LLMRequest, WireMessage
from agent_runtime.engine.llm.call_builder import CallBuilder
from agent_runtime.engine.llm.catalog import FallbackTarget, ModelCatalog, ModelConfigError
from agent_runtime.engine.llm.end_user import end_user_id
from agent_runtime.engine.llm.models import CallOptions
from agent_runtime.engine.runtime import load_config
from agent_runtime.settings import Settings

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "models.yaml"
USER = UUID("3f1a0e4e-8d7c-4b8e-9a51-2c0f7c1c9e11")


def settings(**values: object) -> Settings:
    defaults: dict[str, object] = {"llm_model": None, "deepseek_api_key": None, "openai_api_key": None}
    return Settings(_env_file=None, **{**defaults, **values})  # type: ignore[arg-type]


def test_a_deepseek_key_alone_selects_deepseek_flash() -> None:
    assert settings(deepseek_api_key="sk-x").effective_llm_model == "deepseek/deepseek-flash"
    assert settings().effective_llm_model == "demo/agent"


@pytest.mark.parametrize(
    ("model", "replacement"),
    [
        ("deepseek-chat", "use deepseek/deepseek-flash"),
        ("deepseek/deepseek-chat", "use deepseek/deepseek-flash"),
        ("deepseek-reasoner", "use deepseek/deepseek-flash with `thinking: enabled` in tasks.yaml"),
    ],
)
def test_a_retired_model_stops_start_up_with_one_line_naming_the_replacement(model: str, replacement: str) -> None:
    with pytest.raises(ModelConfigError) as error:
        load_config(settings(llm_model=model, deepseek_api_key="sk-x"))
    full = model if "/" in model else f"deepseek/{model}"
    assert str(error.value) == (
        f"LLM_MODEL: {full} was retired on 2026-07-24 "
        f"(https://api-docs.deepseek.com/zh-cn/quick_start/pricing); {replacement}"
    )


def test_serve_refuses_a_retired_model_before_anything_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from agent_runtime.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLM_MODEL", "deepseek-chat")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--port", "1"])
    assert str(exit_info.value.code).startswith("invalid configuration: LLM_MODEL: deepseek/deepseek-chat was retired")
    assert str(exit_info.value.code).endswith("; use deepseek/deepseek-flash")


def test_a_retired_model_in_a_task_or_a_chain_is_refused(tmp_path: Path) -> None:
    crewai = tmp_path / "crewai"
    crewai.mkdir()
    source = Path(__file__).resolve().parents[2] / "config" / "crewai"
    (crewai / "agents.yaml").write_text((source / "agents.yaml").read_text())
    tasks = (source / "tasks.yaml").read_text()
    (crewai / "tasks.yaml").write_text(
        tasks.replace("  thinking: disabled\n", "  thinking: disabled\n  model: deepseek-chat\n", 1)
    )
    with pytest.raises(ModelConfigError, match=r"tasks.yaml: intent.model: deepseek/deepseek-chat was retired"):
        load_config(settings(deepseek_api_key="sk-x", crewai_config_dir=crewai))

    chains = tmp_path / "models.yaml"
    chains.write_text("fallbacks:\n  deepseek/deepseek-flash: [deepseek-reasoner]\n")
    catalog = ModelCatalog.load(chains)
    assert catalog.retired("deepseek-chat") is None  # this file lists none
    chains.write_text(SHIPPED.read_text() + "  deepseek/deepseek-v4-pro: [deepseek-reasoner]\n")
    with pytest.raises(
        ModelConfigError, match=r"fallbacks.deepseek/deepseek-v4-pro\[0\]: deepseek-reasoner was retired"
    ):
        ModelCatalog.load(chains)


def test_the_shipped_chain_falls_back_from_flash_to_pro() -> None:
    catalog = ModelCatalog.load(SHIPPED)
    assert catalog.chain("deepseek/deepseek-flash") == [FallbackTarget(model="deepseek/deepseek-v4-pro")]
    assert catalog.chain("deepseek/deepseek-v4-pro") == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("fallbacks: {a/b: [a/b]}\n", "fallbacks.a/b[0]: a/b is already in the chain"),
        ("fallbacks: {a/b: [c/d, c/d]}\n", "fallbacks.a/b[1]: c/d is already in the chain"),
        ("fallbacks: {a/b: [{model: c/d, key: x}]}\n", "fallbacks.a/b.0.key: Extra inputs are not permitted"),
        ("retired: [{model: a/b}]\n", "retired.0.retired_at: Field required"),
    ],
)
def test_an_invalid_models_file_names_the_key(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    with pytest.raises(ModelConfigError) as raised:
        ModelCatalog.load(path)
    assert str(raised.value) == f"{path}: {error}"


def _request(**values: object) -> LLMRequest:
    return LLMRequest(messages=[WireMessage(role="user", content="hi")], **values)  # type: ignore[arg-type]


def test_deepseek_gets_thinking_effort_and_user_id_as_its_api_names_them() -> None:
    builder = CallBuilder(settings(deepseek_api_key="sk-x", llm_timeout_seconds=30, llm_connect_timeout_seconds=3))
    target = builder.target("deepseek/deepseek-flash")
    request = _request(thinking=True, reasoning_effort="max", end_user="u0123")
    assert builder.kwargs(request, target, stream=False) == {
        "model": "deepseek/deepseek-flash",
        "messages": [{"role": "user", "content": "hi"}],
        "timeout": httpx.Timeout(30, connect=3),
        "num_retries": 0,
        "max_retries": 0,
        "api_key": "sk-x",
        "thinking": {"type": "enabled"},
        "reasoning_effort": "max",
        "extra_body": {"user_id": "u0123"},
    }
    off = builder.kwargs(_request(thinking=False, reasoning_effort="max"), target, stream=False)
    assert (off["thinking"], "reasoning_effort" in off, "extra_body" in off) == ({"type": "disabled"}, False, False)


def test_other_providers_get_only_what_they_understand() -> None:
    builder = CallBuilder(settings(openai_api_key="sk-o", llm_model="openai/gpt-4o-mini"))
    openai = builder.kwargs(_request(thinking=False, end_user="u0123"), builder.target(None), stream=False)
    assert ("thinking" in openai, openai["user"]) == (False, "u0123")
    demo = CallBuilder(settings()).kwargs(
        _request(thinking=True, reasoning_effort="low", end_user="u1"),
        CallBuilder(settings()).target(None),
        stream=False,
    )
    assert {"thinking", "reasoning_effort", "extra_body", "user"}.isdisjoint(demo)


def test_end_user_ids_are_opaque_stable_keyed_and_within_deepseeks_rules() -> None:
    key = SecretStr("k" * 32)
    value = end_user_id(key, USER)
    assert value == end_user_id(key, USER)
    assert value != end_user_id(SecretStr("j" * 32), USER)
    assert value != end_user_id(key, UUID(int=USER.int + 1))
    assert str(USER) not in value and USER.hex not in value
    assert len(value) == 33 and value.startswith("u") and value[1:].isalnum()
    # LLMRequest validates it as DeepSeek does (letters, digits, _ and -, at most 512 bytes).
    assert _request(end_user=value).end_user == value


def test_each_task_has_its_own_call_options_and_the_demo_model_takes_every_task() -> None:
    templates = load_config(settings(deepseek_api_key="sk-x"))
    assert templates.call_options("intent", settings(deepseek_api_key="sk-x")) == CallOptions(
        model="deepseek/deepseek-flash", thinking=False
    )
    assert templates.call_options("execution", settings()) == CallOptions(model="demo/agent", thinking=False)
