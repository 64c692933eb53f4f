"""Loading config/pricing.yaml: exact decimals, model-name resolution, errors naming the file and key."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from agent_runtime.engine.billing import ModelPrice, PricingConfigError, PricingTable
from agent_runtime.resources import default_config_dir
from agent_runtime.settings import Settings


def test_shipped_table_has_deepseek_and_demo_prices() -> None:
    table = PricingTable.load(Settings(_env_file=None).pricing_file)  # type: ignore[call-arg]
    deepseek = ModelPrice(
        input_cache_hit=Decimal("0.2"), input_cache_miss=Decimal("2"), output=Decimal("3"), aliases=("deepseek-chat",)
    )
    assert table.pricing.models == {
        "deepseek/deepseek-chat": deepseek,
        "demo/agent": ModelPrice(input_cache_hit=Decimal(0), input_cache_miss=Decimal(0), output=Decimal(0)),
    }
    assert table.lookup("deepseek-chat") == table.lookup("deepseek/deepseek-chat")
    found = table.lookup("deepseek-chat")
    assert found is not None and found.key == "deepseek/deepseek-chat"
    assert table.lookup("deepseek-3.2") is None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pricing.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_unquoted_numbers_are_read_as_the_decimals_written(tmp_path: Path) -> None:
    path = write(tmp_path, "currency: CNY\nmodels:\n  a/b: {input_cache_hit: 0.1, input_cache_miss: 0.3, output: 7}\n")
    price = PricingTable.load(path).pricing.models["a/b"]
    assert (price.input_cache_hit, price.input_cache_miss, price.output) == (Decimal("0.1"), Decimal("0.3"), Decimal(7))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "currency: CNY\nmodels:\n  a/b: {input_cache_hit: 1, input_cache_miss: 1, output: cheap}\n",
            "models.a/b.output",
        ),
        ("currency: CNY\nmodels:\n  a/b: {input_cache_hit: 1, input_cache_miss: 1}\n", "models.a/b.output"),
        (
            "currency: CNY\nmodels:\n  a/b: {input_cache_hit: -1, input_cache_miss: 1, output: 1}\n",
            "models.a/b.input_cache_hit",
        ),
        ("currency: USD\nmodels: {}\n", "currency"),
        (
            "currency: CNY\nmodels:\n  a/b: {input_cache_hit: 1, input_cache_miss: 1, output: 1, typo: 2}\n",
            "models.a/b.typo",
        ),
    ],
)
def test_invalid_entries_name_the_file_and_key(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PricingConfigError) as caught:
        PricingTable.load(path)
    assert caught.value.message.startswith(f"{path}: {where}: ")


def test_a_name_used_twice_is_refused(tmp_path: Path) -> None:
    row = "{input_cache_hit: 1, input_cache_miss: 1, output: 1, aliases: [shared]}"
    path = write(tmp_path, f"currency: CNY\nmodels:\n  a/one: {row}\n  a/two: {row}\n")
    with pytest.raises(PricingConfigError, match=r"models\.a/two: name 'shared' is already used by models\.a/one"):
        PricingTable.load(path)


def test_unreadable_or_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(PricingConfigError, match=r"missing\.yaml: cannot read"):
        PricingTable.load(tmp_path / "missing.yaml")
    with pytest.raises(PricingConfigError, match=r"pricing\.yaml: cannot read"):
        PricingTable.load(write(tmp_path, "models: [unclosed\n"))


def test_project_root_points_at_the_shipped_file() -> None:
    assert (default_config_dir() / "pricing.yaml").is_file()
