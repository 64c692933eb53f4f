"""No model is free by accident: `serve` refuses a configured model with no price in force (naming it) unless
UNPRICED_MODEL_PRICE_CNY is set, which then prices its calls; an id LiteLLM does not know gets a warning."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from agent_runtime.engine.billing.cost import CostCalculator, recompute_cost
from agent_runtime.engine.billing.models import LLMUsage
from agent_runtime.engine.billing.pricing import PricingConfigError, PricingTable
from agent_runtime.engine.runtime import load_config
from agent_runtime.settings import Settings

PRICING = Path(__file__).resolve().parents[2] / "config" / "pricing.yaml"
NOW = datetime(2026, 12, 5, 3, tzinfo=UTC)


def settings(**values: object) -> Settings:
    defaults: dict[str, object] = {"llm_model": None, "deepseek_api_key": None, "openai_api_key": None}
    return Settings(_env_file=None, **{**defaults, **values})  # type: ignore[arg-type]


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("LLM_MODEL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "UNPRICED_MODEL_PRICE_CNY", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_an_unpriced_llm_model_stops_start_up_naming_it() -> None:
    with pytest.raises(PricingConfigError) as error:
        load_config(settings(llm_model="openai/gpt-4o-mini", openai_api_key="sk-o"))
    assert str(error.value) == (
        f"LLM_MODEL: openai/gpt-4o-mini has no price in force in {PRICING}; add one, or set "
        "UNPRICED_MODEL_PRICE_CNY (CNY per million tokens) for budgets to count its calls"
    )


def test_a_typo_in_a_deepseek_id_stops_start_up() -> None:
    with pytest.raises(PricingConfigError, match=r"^LLM_MODEL: deepseek/deepseek-flsh has no price in force"):
        load_config(settings(llm_model="deepseek-flsh", deepseek_api_key="sk-x"))


def test_the_shipped_models_and_the_demo_model_start() -> None:
    load_config(settings(deepseek_api_key="sk-x"))
    load_config(settings())


def test_serve_refuses_an_unpriced_model_with_one_line(
    cli_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_runtime.cli import main

    monkeypatch.setenv("LLM_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-o")
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--port", "1"])
    assert str(exit_info.value.code).startswith(
        "invalid configuration: LLM_MODEL: openai/gpt-4o-mini has no price in force in "
    )


def test_with_a_fallback_price_serve_starts_and_warns_of_an_id_litellm_does_not_know(
    cli_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_runtime.api import server
    from agent_runtime.cli import main

    served: list[Settings] = []
    monkeypatch.setattr(server, "run_server", served.append)
    monkeypatch.setenv("LLM_MODEL", "deepseek/deepseek-flsh")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")
    monkeypatch.setenv("UNPRICED_MODEL_PRICE_CNY", "4")

    assert main(["serve", "--port", "1"]) == 0

    assert [s.unpriced_model_price_cny for s in served] == [Decimal(4)]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        "agent-runtime: warning: LLM_MODEL: LiteLLM does not know deepseek/deepseek-flsh; it knows "
    )
    assert "deepseek/deepseek-flash," in warnings[0] and "deepseek/deepseek-v4-pro" in warnings[0]


def test_the_shipped_models_get_no_warning(
    cli_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_runtime.api import server
    from agent_runtime.cli import main

    monkeypatch.setattr(server, "run_server", lambda _: None)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-x")

    assert main(["serve", "--port", "1"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_fallback_price_prices_and_audits_an_unpriced_models_calls() -> None:
    table = PricingTable.load(PRICING, fallback_per_million=Decimal(4))
    usage = LLMUsage(prompt_tokens=1_000_000, completion_tokens=500_000, total_tokens=1_500_000)

    cost = CostCalculator(table).cost("openai/gpt-4o-mini", usage, at=NOW)

    assert (cost.cost, cost.cost_source, cost.price_tier) == (Decimal(6), "custom_pricing", "standard")
    assert cost.price_effective_from is not None
    audited = recompute_cost(
        table, "openai/gpt-4o-mini", usage, tier="standard", effective_from=cost.price_effective_from
    )
    assert audited == cost
    # A listed model keeps its own price.
    listed = CostCalculator(table).cost("deepseek/deepseek-flash", usage, at=NOW)
    assert listed == CostCalculator(PricingTable.load(PRICING)).cost("deepseek/deepseek-flash", usage, at=NOW)


def test_the_shipped_models_are_checked_without_loading_litellm(tmp_path: Path) -> None:
    # LiteLLM's model list is read only for a model the price list does not name: `serve`'s parent process (which
    # with --workers only supervises) stays without LiteLLM's ~2.5 s import and ~100 MB.
    probe = (
        "import sys\n"
        "from agent_runtime.cli import _config_or_exit\n"
        "from agent_runtime.settings import load_settings\n"
        "_config_or_exit(load_settings())\n"
        "print('litellm' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_MODEL", "UNPRICED_MODEL_PRICE_CNY", "DATABASE_URL")}
    env["DEEPSEEK_API_KEY"] = "sk-x"
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "False\n", "")
