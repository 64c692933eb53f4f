"""Secure defaults: what production refuses, and empty values meaning unset."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_runtime.cli import main
from agent_runtime.settings import DEMO_MODEL, DEV_JWT_SECRET, Settings, UserQuotas, get_settings

STRONG_SECRET = "s" * 32


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No settings from the caller's environment or a .env file in the working directory."""
    names = {name.upper() for name in Settings.model_fields}
    for key in list(os.environ):
        if key.upper() in names:
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (None, "JWT_SECRET must be set to a real secret when ENVIRONMENT=production"),
        ("", "JWT_SECRET must be set to a real secret when ENVIRONMENT=production"),
        (DEV_JWT_SECRET, "JWT_SECRET must be set to a real secret when ENVIRONMENT=production"),
        ("s" * 31, "JWT_SECRET must have at least 32 bytes in production"),
    ],
    ids=["unset", "empty", "dev-secret", "short"],
)
def test_production_refuses_a_weak_secret(clean_env: pytest.MonkeyPatch, secret: str | None, message: str) -> None:
    clean_env.setenv("ENVIRONMENT", "production")
    if secret is not None:
        clean_env.setenv("JWT_SECRET", secret)
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert [e["msg"] for e in refused.value.errors()] == [f"Value error, {message}"]


def test_production_accepts_a_strong_secret(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ENVIRONMENT", "production")
    clean_env.setenv("JWT_SECRET", STRONG_SECRET)
    assert Settings().jwt_secret.get_secret_value() == STRONG_SECRET


def test_development_keeps_the_dev_secret_when_unset_or_empty(clean_env: pytest.MonkeyPatch) -> None:
    assert Settings().jwt_secret.get_secret_value() == DEV_JWT_SECRET
    clean_env.setenv("JWT_SECRET", "")
    assert Settings().jwt_secret.get_secret_value() == DEV_JWT_SECRET


def test_empty_values_mean_unset(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "LLM_MODEL", "DATABASE_URL", "PORT", "JWT_ISSUER"):
        clean_env.setenv(name, "")
    from_env = Settings()
    (tmp_path / ".env").write_text("DEEPSEEK_API_KEY=\nOPENAI_API_KEY=\nMAX_REQUEST_BYTES=\n", encoding="utf-8")
    for name in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY"):
        clean_env.delenv(name)
    from_file = Settings()
    for settings in (from_env, from_file, Settings(_env_file=None, deepseek_api_key="", openai_api_key="")):  # type: ignore[call-arg, arg-type]
        assert settings.deepseek_api_key is None and settings.openai_api_key is None
        assert settings.effective_llm_model == DEMO_MODEL and settings.is_demo_model
    assert (from_env.port, from_env.database_url, from_env.jwt_issuer) == (8000, None, None)
    assert from_file.max_request_bytes == 1_048_576


def test_an_openai_key_without_a_model_is_refused(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ValidationError) as refused:
        Settings()
    expected = "Value error, OPENAI_API_KEY is set but LLM_MODEL is not: set LLM_MODEL, e.g. openai/gpt-4o-mini"
    assert [e["msg"] for e in refused.value.errors()] == [expected]
    clean_env.setenv("LLM_MODEL", "openai/gpt-4o-mini")
    assert Settings().effective_llm_model == "openai/gpt-4o-mini"


def test_a_deepseek_key_alone_selects_deepseek(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DEEPSEEK_API_KEY", "sk-test")
    assert Settings().effective_llm_model == "deepseek/deepseek-flash"


def test_the_cli_stops_with_the_reason(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ENVIRONMENT", "production")
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as stopped:
            main(["token", "--user", "3f1a0e4e-8d7c-4b8e-9a51-2c0f7c1c9e11"])
    finally:
        get_settings.cache_clear()
    assert stopped.value.code == (
        "invalid configuration: settings: Value error, "
        "JWT_SECRET must be set to a real secret when ENVIRONMENT=production"
    )


def test_zero_is_accepted_and_means_no_limit_for_every_quota(clean_env: pytest.MonkeyPatch) -> None:
    quotas = (
        "MAX_CONCURRENT_RUNS_PER_USER",
        "MAX_RUNS_PER_USER_PER_MINUTE",
        "MAX_SESSIONS_PER_USER",
        "USER_DAILY_BUDGET_CNY",
        "USER_MONTHLY_BUDGET_CNY",
    )
    for name in quotas:
        clean_env.setenv(name, "0")
    assert UserQuotas() == Settings().user_quotas  # every limit unset: the database enforces none
    for name in quotas:
        clean_env.delenv(name)
    assert all(value is not None for value in Settings().user_quotas.model_dump().values())  # the defaults limit
