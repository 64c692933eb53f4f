"""Reading usage in the three shapes providers send it: DeepSeek's names, OpenAI's cached_tokens only, a dict."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent_runtime.engine.billing import LLMUsage
from agent_runtime.engine.llm.responses import usage_from_litellm

EXPECTED = LLMUsage(prompt_tokens=50, completion_tokens=5, total_tokens=55, cache_hit_tokens=20, cache_miss_tokens=30)


@pytest.mark.parametrize(
    "raw",
    [
        SimpleNamespace(
            prompt_tokens=50,
            completion_tokens=5,
            total_tokens=55,
            prompt_cache_hit_tokens=20,
            prompt_cache_miss_tokens=30,
        ),
        SimpleNamespace(
            prompt_tokens=50,
            completion_tokens=5,
            total_tokens=55,
            prompt_tokens_details=SimpleNamespace(cached_tokens=20),
        ),
        {"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 20}},
    ],
    ids=["deepseek-names", "openai-cached-tokens", "dict-from-custom-provider"],
)
def test_usage_reads_the_same_from_every_shape(raw: object) -> None:
    assert usage_from_litellm(raw) == EXPECTED


def test_usage_without_cache_information_leaves_hit_and_miss_unknown() -> None:
    assert usage_from_litellm({"prompt_tokens": 7, "completion_tokens": 3}) == LLMUsage(
        prompt_tokens=7, completion_tokens=3, total_tokens=10, cache_hit_tokens=None, cache_miss_tokens=None
    )
