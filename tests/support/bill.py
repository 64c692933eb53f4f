"""What the DeepSeek stub billed, priced as the service prices it (config/pricing.yaml): the provider's side of a
charge, for tests that check what a lost run was charged against it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from tests.stubs.deepseek_stub import RecordedRequest, count_tokens, prompt_tokens

from agent_runtime.engine.billing.pricing import PricingTable
from agent_runtime.resources import default_config_dir

_PER_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Bill:
    answered: Decimal  # what the stub billed for the requests it answered whole
    unanswered: Decimal  # the prompts of those it never answered whole, at the cache-miss price
    streamed: Decimal  # the output those streamed before they were cut (the provider bills it)


def stub_bill(requests: list[RecordedRequest], model: str = "deepseek/deepseek-flash") -> Bill:
    """The bill of `requests` at today's prices of `model` (all of them went to it)."""
    quote = PricingTable.load(default_config_dir() / "pricing.yaml").quote(model, datetime.now(UTC))
    assert quote is not None
    price = quote.price
    answered = unanswered = streamed = Decimal(0)
    for request in requests:
        usage = request.billed
        if usage is None:
            unanswered += prompt_tokens(request) * price.input_cache_miss / _PER_MILLION
            streamed += count_tokens(request.streamed) * price.output / _PER_MILLION
            continue
        answered += (
            usage.prompt_cache_miss_tokens * price.input_cache_miss
            + usage.prompt_cache_hit_tokens * price.input_cache_hit
            + usage.completion_tokens * price.output
        ) / _PER_MILLION
    return Bill(answered=answered, unanswered=unanswered, streamed=streamed)
