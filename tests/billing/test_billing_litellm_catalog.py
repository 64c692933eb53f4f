"""CNY prices registered in LiteLLM under our own alias leave the public USD entries untouched."""

from __future__ import annotations

import copy
import importlib.resources
import json
from decimal import Decimal

from agent_runtime.engine.billing import LLMUsage, PricingTable
from agent_runtime.engine.billing.litellm_catalog import catalog_cost, cny_alias, register_cny_prices
from agent_runtime.engine.litellm_import import load_litellm
from agent_runtime.resources import default_config_dir

TABLE = PricingTable.load(default_config_dir() / "pricing.yaml")


def usd_cost_of_public_entry() -> float:
    litellm = load_litellm()
    response = litellm.ModelResponse(
        model="deepseek/deepseek-chat",
        usage=litellm.Usage(prompt_tokens=1000, completion_tokens=1000, total_tokens=2000),
    )
    return float(litellm.completion_cost(completion_response=response, model="deepseek/deepseek-chat"))


def test_registration_does_not_touch_the_public_deepseek_entries() -> None:
    litellm = load_litellm()
    before = {key: copy.deepcopy(litellm.model_cost.get(key)) for key in ("deepseek/deepseek-chat", "deepseek-chat")}
    usd_before = usd_cost_of_public_entry()

    register_cny_prices(TABLE)
    register_cny_prices(TABLE)

    assert {key: litellm.model_cost.get(key) for key in before} == before
    assert usd_cost_of_public_entry() == usd_before
    # Also against LiteLLM's bundled file, in case an earlier test had already overwritten the live map.
    bundled_text = (importlib.resources.files("litellm") / "model_prices_and_context_window_backup.json").read_text()
    bundled = json.loads(bundled_text)["deepseek/deepseek-chat"]
    prices = ("input_cost_per_token", "cache_read_input_token_cost", "output_cost_per_token", "litellm_provider")
    assert {key: litellm.model_cost["deepseek/deepseek-chat"][key] for key in prices} == {
        key: bundled[key] for key in prices
    }
    registered = litellm.model_cost[cny_alias("deepseek/deepseek-chat")]
    assert {key: registered[key] for key in prices} == {
        "input_cost_per_token": 2e-06,
        "cache_read_input_token_cost": 2e-07,
        "output_cost_per_token": 3e-06,
        "litellm_provider": "agent-runtime-cny",
    }


def test_catalog_cost_is_cny_at_the_cache_miss_price() -> None:
    register_cny_prices(TABLE)
    usage = LLMUsage(prompt_tokens=1234, completion_tokens=567, total_tokens=1801)
    # 1234 * 2 + 567 * 3 = 4169 CNY per million tokens
    assert catalog_cost("deepseek/deepseek-chat", usage) == Decimal("0.0041690000")
    assert cny_alias("deepseek/deepseek-chat") == "agent-runtime-cny/deepseek-chat"
