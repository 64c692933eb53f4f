"""When to retry a failed model call and how long to wait first."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.llm.errors import LLMError
from agent_runtime.settings import Settings


class RetryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_retries: int = Field(ge=0)
    base_seconds: float = Field(ge=0)
    max_seconds: float = Field(ge=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(
            max_retries=settings.llm_max_retries,
            base_seconds=settings.llm_retry_base_seconds,
            max_seconds=settings.llm_retry_max_seconds,
        )

    def should_retry(self, error: LLMError, retries_done: int) -> bool:
        return error.retryable and retries_done < self.max_retries

    def delay(self, error: LLMError, retries_done: int, rng: random.Random) -> float:
        """Full jitter (uniform in [0, base * 2^n], capped) unless the provider named a wait in Retry-After."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_seconds)
        ceiling = min(self.max_seconds, self.base_seconds * (2**retries_done))
        return rng.uniform(0.0, ceiling)
