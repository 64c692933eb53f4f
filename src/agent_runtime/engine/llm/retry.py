"""When to retry a failed model call and how long to wait first.

Two kinds of failure, two limits. A 429 is the provider saying it is busy (DeepSeek: too many requests in flight for
the account and model, quick_start/rate_limit), which passes: the call waits for capacity, with growing, jittered
delays or the provider's Retry-After, for up to LLM_OVERLOAD_WAIT_SECONDS from its first 429 (`OverloadWait`), before
it goes to its fallback chain, whose walk gets the same wait. Other retryable failures (5xx, timeouts, dropped
connections, unreadable answers) get LLM_MAX_RETRIES retries with full jitter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.llm.errors import LLMError, LLMRateLimitError
from agent_runtime.settings import Settings


class RetryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_retries: int = Field(ge=0)
    base_seconds: float = Field(ge=0)
    max_seconds: float = Field(ge=0)
    overload_seconds: float = Field(default=0.0, ge=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(
            max_retries=settings.llm_max_retries,
            base_seconds=settings.llm_retry_base_seconds,
            max_seconds=settings.llm_retry_max_seconds,
            overload_seconds=settings.llm_overload_wait_seconds,
        )

    def should_retry(self, error: LLMError, retries_done: int) -> bool:
        return error.retryable and retries_done < self.max_retries

    def delay(self, error: LLMError, retries_done: int, rng: random.Random) -> float:
        """Full jitter (uniform in [0, base * 2^n], capped) unless the provider named a wait in Retry-After."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_seconds)
        ceiling = min(self.max_seconds, self.base_seconds * (2**retries_done))
        return rng.uniform(0.0, ceiling)

    def overload_delay(self, error: LLMError, waits_done: int, rng: random.Random) -> float:
        """The provider's Retry-After, else half of base * 2^n (capped) plus a random part up to as much again: the
        delays grow, and the calls refused together come back spread out."""
        if error.retry_after is not None:
            return error.retry_after
        ceiling = min(self.max_seconds, self.base_seconds * (2**waits_done))
        return rng.uniform(ceiling / 2, ceiling)


def is_overload(error: LLMError) -> bool:
    return isinstance(error, LLMRateLimitError)


@dataclass
class OverloadWait:
    """One call's wait on one model (or one fallback chain) that answers 429: delays until `policy.overload_seconds`
    have passed since the first 429, the last one cut to what is left."""

    policy: RetryPolicy
    deadline: float | None = None
    waits: int = 0

    def next_delay(self, error: LLMError, rng: random.Random, now: float) -> float | None:
        """How long to wait before the next attempt; None when the budget is spent."""
        if self.deadline is None:
            self.deadline = now + self.policy.overload_seconds
        left = self.deadline - now
        if left <= 0:
            return None
        delay = self.policy.overload_delay(error, self.waits, rng)
        self.waits += 1
        return min(delay, left)
