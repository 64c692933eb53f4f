from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.stubs.deepseek_stub import DeepSeekStub

from agent_runtime.engine.llm import LLMClient
from agent_runtime.engine.llm.catalog import ModelCatalog, ModelsFile
from agent_runtime.settings import Settings

MakeClient = Callable[..., LLMClient]
# Calls are priced at their start: a Tuesday, 10:30 in Beijing (deepseek-flash at peak: 0.04 / 2 / 8 CNY per
# million cache-hit, cache-miss and output tokens).
PEAK = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
PEAK_ENTRY = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture
async def stub() -> AsyncIterator[DeepSeekStub]:
    async with DeepSeekStub() as server:
        yield server


def stub_settings(stub: DeepSeekStub, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_model": "deepseek/deepseek-flash",
        "llm_api_base": stub.base_url,
        "deepseek_api_key": stub.api_key,
        "openai_api_key": None,
        "llm_timeout_seconds": 5.0,
        "llm_connect_timeout_seconds": 2.0,
        "llm_max_retries": 3,
        "llm_retry_base_seconds": 0.0,
        "llm_retry_max_seconds": 0.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
def make_client(stub: DeepSeekStub) -> MakeClient:
    """A client pointed at the stub; keyword arguments override its settings."""

    def build(**overrides: Any) -> LLMClient:
        # One model's own retries; the fallback chain is tests/llm/test_llm_fallbacks.py's.
        return LLMClient(stub_settings(stub, **overrides), catalog=ModelCatalog(ModelsFile()), clock=lambda: PEAK)

    return build


@pytest.fixture
def demo_settings() -> Settings:
    return Settings(_env_file=None, llm_model=None, deepseek_api_key=None, openai_api_key=None)  # type: ignore[call-arg]
