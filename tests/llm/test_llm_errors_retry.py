"""Error translation, key scrubbing and the backoff schedule."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from agent_runtime.engine.llm import (
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMInsufficientBalanceError,
    LLMRateLimitError,
    LLMServerError,
    LLMTimeoutError,
)
from agent_runtime.engine.llm.errors import map_exception, parse_retry_after, scrub
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.retry import RetryPolicy


def provider_error(cls_name: str, status: int, headers: dict[str, str] | None = None) -> Exception:
    exceptions = load_litellm()
    response = httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://x"))
    cls = getattr(exceptions, cls_name)
    return cls(message="boom sk-live-abcdef123456", llm_provider="deepseek", model="deepseek-flash", response=response)


@pytest.mark.parametrize(
    ("cls_name", "status", "expected"),
    [
        ("RateLimitError", 429, LLMRateLimitError),
        ("InternalServerError", 500, LLMServerError),
        ("ServiceUnavailableError", 503, LLMServerError),
        ("BadRequestError", 400, LLMBadRequestError),
        ("AuthenticationError", 401, LLMAuthError),
        ("UnprocessableEntityError", 422, LLMBadRequestError),
    ],
)
def test_status_errors_map_to_typed_errors(cls_name: str, status: int, expected: type[LLMError]) -> None:
    error = map_exception(provider_error(cls_name, status))
    assert (type(error), error.provider_status) == (expected, status)
    assert "sk-live-abcdef123456" not in error.provider_message
    assert error.retryable is (status in (429, 500, 503))


def test_timeouts_and_connection_errors_are_retryable() -> None:
    exceptions = load_litellm()
    assert isinstance(map_exception(TimeoutError()), LLMTimeoutError)
    timeout = exceptions.Timeout(message="slow", model="m", llm_provider="deepseek")
    connection = exceptions.APIConnectionError(message="refused", llm_provider="deepseek", model="m")
    assert type(map_exception(timeout)) is LLMTimeoutError
    assert type(map_exception(connection)) is LLMConnectionError
    assert map_exception(connection).retryable


class PaymentRequired(Exception):
    status_code = 402


def test_status_402_is_insufficient_balance() -> None:
    error = map_exception(PaymentRequired("Insufficient Balance"))
    assert (type(error), error.provider_status, error.retryable) == (LLMInsufficientBalanceError, 402, False)


def test_unknown_exceptions_become_plain_llm_errors() -> None:
    error = map_exception(ValueError("odd"))
    assert (type(error), error.retryable, error.provider_message) == (LLMError, False, "ValueError: odd")


def test_scrub_removes_configured_secrets_and_key_shapes() -> None:
    assert scrub("key mysecret and sk-1234567890abc", ["mysecret"]) == "key *** and sk-***"


def test_parse_retry_after_seconds_and_http_dates() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (parse_retry_after(later) or 0) <= 30


def test_backoff_is_full_jitter_capped_and_retry_after_wins() -> None:
    policy = RetryPolicy(max_retries=3, base_seconds=0.5, max_seconds=8.0)
    rng = random.Random(7)
    server = LLMServerError()
    delays = [policy.delay(server, n, rng) for n in range(6) for _ in range(200)]
    assert all(0 <= d <= 8.0 for d in delays)
    assert max(delays[:200]) <= 0.5 and max(delays[200:400]) <= 1.0
    assert max(delays[-200:]) > 4.0  # the cap, not the exponent, bounds late retries
    assert policy.delay(LLMRateLimitError(retry_after=3.0), 0, rng) == 3.0
    assert policy.delay(LLMRateLimitError(retry_after=60.0), 0, rng) == 8.0
    assert policy.should_retry(server, 2) and not policy.should_retry(server, 3)
    assert not policy.should_retry(LLMBadRequestError(), 0)
