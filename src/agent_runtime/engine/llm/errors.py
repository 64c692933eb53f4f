"""Typed model-call errors and the translation from LiteLLM's exceptions.

Messages are generic on purpose (the HTTP layer shows them to users); the provider's own text is kept in
`provider_message`, with API keys scrubbed, for logs and audits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import ClassVar

# Exception types only (LiteLLM's transports raise them); nothing here makes an HTTP request.
import aiohttp
import httpx

from agent_runtime.engine.errors import UpstreamError
from agent_runtime.engine.llm.litellm_import import load_litellm

_KEY_LIKE = re.compile(r"\b(sk|key)-[A-Za-z0-9_\-]{6,}")
_MAX_PROVIDER_MESSAGE = 1000


class LLMError(UpstreamError):
    code = "llm_error"
    retryable: ClassVar[bool] = False
    default_message: ClassVar[str] = "The language model call failed."

    def __init__(
        self,
        message: str | None = None,
        *,
        provider_status: int | None = None,
        provider_message: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message or self.default_message)
        self.provider_status = provider_status
        self.provider_message = provider_message
        self.retry_after = retry_after


class LLMRateLimitError(LLMError):
    code = "llm_rate_limited"
    retryable = True
    default_message = "The language model provider is rate limiting requests."


class LLMServerError(LLMError):
    code = "llm_server_error"
    retryable = True
    default_message = "The language model provider had an internal error."


class LLMTimeoutError(LLMError):
    status_code = 504
    code = "llm_timeout"
    retryable = True
    default_message = "The language model did not answer in time."


class LLMConnectionError(LLMError):
    code = "llm_connection_error"
    retryable = True
    default_message = "Could not reach the language model provider."


class LLMStreamInterruptedError(LLMConnectionError):
    """The stream broke off. Retried only while nothing has reached the caller yet."""

    code = "llm_stream_interrupted"
    default_message = "The language model stream was interrupted."


class LLMUnavailableError(LLMError):
    """The model and every model of its fallback chain kept refusing the call (429, 5xx, timeouts)."""

    status_code = 503
    code = "llm_unavailable"
    default_message = "No language model could answer: the model and its fallbacks are all unavailable."


class LLMBadRequestError(LLMError):
    code = "llm_bad_request"
    default_message = "The language model provider rejected the request."


class LLMAuthError(LLMError):
    code = "llm_auth_error"
    default_message = "The language model provider rejected our credentials."


class LLMInsufficientBalanceError(LLMError):
    code = "llm_insufficient_balance"
    default_message = "The language model account has insufficient balance."


class LLMInvalidResponseError(LLMError):
    """An answer we could not read (e.g. an HTTP 200 with half a JSON body): retried while nothing was delivered."""

    code = "llm_invalid_response"
    retryable = True
    default_message = "The language model provider sent a response we could not read."


def scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _KEY_LIKE.sub(r"\1-***", text)[:_MAX_PROVIDER_MESSAGE]


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _response_headers(exc: BaseException) -> Mapping[str, str]:
    headers = getattr(exc, "litellm_response_headers", None)
    if headers:
        return {str(k).lower(): str(v) for k, v in dict(headers).items()}
    response = getattr(exc, "response", None)
    raw = getattr(response, "headers", None)
    return {str(k).lower(): str(v) for k, v in dict(raw).items()} if raw else {}


def _class_for_status(status: int | None) -> type[LLMError]:
    if status == 429:
        return LLMRateLimitError
    if status in (401, 403):
        return LLMAuthError
    if status == 402:
        return LLMInsufficientBalanceError
    if status == 408:
        return LLMTimeoutError
    if status is not None and status >= 500:
        return LLMServerError
    if status is not None and 400 <= status < 500:
        return LLMBadRequestError
    return LLMInvalidResponseError


def _connection_failure(exc: BaseException) -> bool:
    """LiteLLM reports "connection refused" and "server disconnected" as HTTP 500; the cause chain knows better."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, aiohttp.ClientConnectionError | httpx.ConnectError | httpx.RemoteProtocolError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def map_exception(exc: BaseException, *, secrets: Iterable[str] = ()) -> LLMError:
    """Translate anything a model call raised into our error tree (the caller chains the original)."""
    if isinstance(exc, LLMError):
        return exc
    message = scrub(f"{type(exc).__name__}: {exc}", secrets)
    if isinstance(exc, TimeoutError):
        return LLMTimeoutError(provider_message=message)
    # Raw transport errors only come from reading a provider stream (LLMClient skips LiteLLM's stream
    # wrapper, which used to translate them); LiteLLM translates them on every other path.
    if isinstance(exc, httpx.TimeoutException):
        return LLMTimeoutError(provider_message=message)
    if isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        return LLMStreamInterruptedError(provider_message=message)
    load_litellm()
    from litellm.exceptions import APIConnectionError, APIError, MidStreamFallbackError, Timeout

    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    if isinstance(exc, MidStreamFallbackError):
        if isinstance(exc.original_exception, Timeout):
            return LLMTimeoutError(provider_message=message)
        return LLMStreamInterruptedError(provider_status=status, provider_message=message)
    if isinstance(exc, Timeout):
        return LLMTimeoutError(provider_status=status, provider_message=message)
    if isinstance(exc, APIConnectionError) or _connection_failure(exc):
        return LLMConnectionError(provider_status=status, provider_message=message)
    if status is None and not isinstance(exc, APIError):
        return LLMError(provider_message=message)
    retry_after = parse_retry_after(_response_headers(exc).get("retry-after"))
    return _class_for_status(status)(provider_status=status, provider_message=message, retry_after=retry_after)
