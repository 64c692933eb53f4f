"""Each model call is priced at its start with the price list entry and tier in force then (config/pricing.yaml):
one conversation over a peak hour, an off-peak hour and a new price entry, with the service's clock pinned."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import yaml
from tests.conftest import User
from tests.runs.conftest import MakeHarness, intent_direct, usage

from agent_runtime.engine.billing.cost import recompute_cost
from agent_runtime.engine.billing.models import LLMUsage
from agent_runtime.engine.billing.pricing import PricingTable
from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata
from agent_runtime.resources import default_config_dir

# Tuesday 10:30 Beijing (peak); the same day 20:00 Beijing (off-peak); Wednesday 10:30 Beijing, when the entry below
# is in force (peak).
TIMES = [
    datetime(2026, 12, 1, 2, 30, tzinfo=UTC),
    datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
    datetime(2026, 12, 2, 2, 30, tzinfo=UTC),
]
NEW_ENTRY = {
    "effective_from": "2026-12-02T00:00:00Z",
    "peak": {"input_cache_hit": "0.1", "input_cache_miss": "3", "output": "10"},
    "off_peak": {"input_cache_hit": "0.05", "input_cache_miss": "1.5", "output": "5"},
    "source": "https://example.invalid/a-price-change",
    "read_on": "2026-12-01",
}


def _price_list(tmp_path: Path) -> Path:
    shipped = yaml.safe_load((default_config_dir() / "pricing.yaml").read_text(encoding="utf-8"))
    shipped["models"]["deepseek/deepseek-flash"]["prices"].append(NEW_ENTRY)
    path = tmp_path / "pricing.yaml"
    path.write_text(yaml.safe_dump(shipped, allow_unicode=True), encoding="utf-8")
    return path


async def test_a_conversation_is_priced_hour_by_hour_and_entry_by_entry(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    pricing = _price_list(tmp_path)
    now = [TIMES[0]]
    async with make_harness(pricing_file=pricing, clock=lambda: now[0]) as h:
        user = make_user()
        sid = await h.new_session(user)
        for at in TIMES:
            now[0] = at
            h.stub.enqueue(intent_direct(f"answer at {at:%H:%M}", usage=usage(1000, 100, 600)))
            result = await h.run(user, sid, "hello")
            assert result.events[-1]["type"] == "RUN_FINISHED", result.body

        replies = [m for m in await h.visible(user, sid) if m["role"] == "assistant"]
        priced = [AssistantOutputMetadata.model_validate(m["metadata"]) for m in replies]
        assert [(m.price_tier, m.price_effective_from) for m in priced] == [
            ("peak", datetime(2026, 12, 1, tzinfo=UTC)),
            ("off_peak", datetime(2026, 12, 1, tzinfo=UTC)),
            ("peak", datetime(2026, 12, 2, tzinfo=UTC)),
        ]
        # 600 hits, 400 misses, 100 output tokens: at 0.04 / 2 / 8, half that off-peak, then at 0.1 / 3 / 10.
        assert [m["cost"] for m in replies] == ["0.0016240000", "0.0008120000", "0.0022600000"]
        # Every stored cost can be recomputed from what its row says.
        table = PricingTable.load(pricing)
        for reply, metadata in zip(replies, priced, strict=True):
            assert metadata.model is not None and metadata.price_tier is not None
            assert metadata.price_effective_from is not None
            tokens = LLMUsage(prompt_tokens=1000, completion_tokens=100, total_tokens=1100, cache_hit_tokens=600)
            again = recompute_cost(
                table, metadata.model, tokens, tier=metadata.price_tier, effective_from=metadata.price_effective_from
            )
            assert again.cost == Decimal(reply["cost"])
