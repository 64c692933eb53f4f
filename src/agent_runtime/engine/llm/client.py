"""`LLMClient`: the one entry point for model calls (LiteLLM `acompletion`, our retries, usage and cost)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agent_runtime.engine.billing.cost import CostCalculator
from agent_runtime.engine.billing.pricing import PricingTable
from agent_runtime.engine.litellm_import import load_litellm
from agent_runtime.engine.llm.call_builder import CallBuilder, CallTarget
from agent_runtime.engine.llm.errors import LLMError, map_exception
from agent_runtime.engine.llm.models import LLMRequest, LLMResponse
from agent_runtime.engine.llm.responses import ParsedMessage, StreamAccumulator, parse_completion
from agent_runtime.engine.llm.retry import RetryPolicy
from agent_runtime.observability import metrics
from agent_runtime.observability.tracing import COST_ATTRIBUTE, mark_failed, model_call_span
from agent_runtime.settings import Settings

logger = logging.getLogger(__name__)

OnDelta = Callable[[str], Awaitable[bool]]
"""Takes a piece of streamed text; returns whether anything of it reached the caller's own client. A call
is retried only while nothing has: a piece the caller kept to itself (say, JSON around the answer) does not
count as delivered."""


@dataclass(slots=True)
class _Progress:
    """What one attempt has done that decides whether it may be retried."""

    delivered: bool = False
    in_callback: bool = False
    first_text: bool = False


def _provider_chunks(stream: Any) -> Any:
    """The provider's own chunk iterator inside LiteLLM's `CustomStreamWrapper` (the stream itself if none).

    The call is still LiteLLM's (request building, auth, HTTP, SSE framing, the provider's chunk parser,
    in-band error chunks); only the wrapper is skipped. It rebuilds every chunk (a new ModelResponseStream,
    hidden params, logging hooks) and the whole response at the end, none of which we use: 20.5 ms CPU
    for a 45-chunk answer against 5.2 ms for the iterator it wraps (`scripts/bench/llm_overhead.py`);
    it was over half of an agent run's CPU. What the wrapper added that we need is done here: usage is on the last
    chunk either way, a missing finish reason is `StreamAccumulator.finish`'s error, and transport errors
    are mapped by `map_exception`. `tests/llm/test_llm_provider_stream.py` pins the attribute.
    """
    inner = getattr(stream, "completion_stream", None)
    return stream if inner is None else inner


async def _close(chunks: Any) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()


class LLMClient:
    """Build one per process and share it; it holds no per-call state.

    Timeouts: `llm_connect_timeout_seconds` bounds connecting; `llm_timeout_seconds` bounds a whole
    non-streamed call, and for a stream the wait for the first chunk and then every socket read (the
    transport's read timeout): a total bound would cut long answers, and an `asyncio.timeout` per chunk
    cost more than the rest of our per-chunk work together.

    Retries (429, 5xx, timeouts, connection errors; never other 4xx) happen only while nothing has been
    delivered: once a streamed piece reached the caller's client (`OnDelta` says so), a failure is raised as
    it is.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        pricing: PricingTable | None = None,
        rng: random.Random | None = None,
        acompletion: Callable[..., Awaitable[Any]] | None = None,
    ) -> None:
        """`acompletion` replaces `litellm.acompletion` (benchmarks measure this layer alone with it)."""
        self.settings = settings
        self.builder = CallBuilder(settings)
        self.retry = RetryPolicy.from_settings(settings)
        self.costs = CostCalculator(pricing or PricingTable.load(settings.pricing_file))
        self._rng = rng or random.Random()
        self._timeout = settings.llm_timeout_seconds
        self._secrets = self.builder.secrets()
        # Looked up once: LiteLLM resolves module attributes lazily, per access.
        self._acompletion: Callable[..., Awaitable[Any]] = acompletion or load_litellm().acompletion

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One answer; with `request.stream` set it is streamed on the wire and returned whole."""
        if request.stream:
            return await self.complete_streaming(request)
        target = self.builder.target(request.model)
        kwargs = self.builder.kwargs(request, target, stream=False)

        async def attempt(_: _Progress) -> LLMResponse:
            async with asyncio.timeout(self._timeout):
                raw = await self._acompletion(**kwargs)
            return self._response(target, parse_completion(raw))

        return await self._observed(target, attempt, streaming=False)

    async def complete_streaming(
        self,
        request: LLMRequest,
        on_delta: OnDelta | None = None,
        on_retry: Callable[[], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
    ) -> LLMResponse:
        """Streams the call, awaiting `on_delta(text)` for every text piece; returns the whole response.

        A failure is retried (when retryable) as long as every `on_delta` returned False; `on_retry()` is
        called before a retry streams, since what the failed attempt fed `on_delta` will not be continued.
        `on_reasoning(text)` gets the model's reasoning as it streams (it is not the answer: never "delivered").

        An exception raised by `on_delta` propagates unchanged and is never retried.
        """
        target = self.builder.target(request.model)
        kwargs = self.builder.kwargs(request, target, stream=True)
        attempts = 0

        started = time.perf_counter()

        async def attempt(progress: _Progress) -> LLMResponse:
            nonlocal attempts
            if attempts and on_retry is not None:
                on_retry()
            attempts += 1
            accumulator = StreamAccumulator()
            async with asyncio.timeout(self._timeout):
                chunks = await self._acompletion(**kwargs)
            try:
                async for chunk in _provider_chunks(chunks):
                    text = accumulator.feed_text(chunk)
                    if text and not progress.first_text:
                        progress.first_text = True
                        metrics.model_first_token(target.model, time.perf_counter() - started)
                    if accumulator.reasoning_delta and on_reasoning is not None:
                        on_reasoning(accumulator.reasoning_delta)
                    if text and on_delta is not None:
                        progress.in_callback = True
                        if await on_delta(text):
                            progress.delivered = True
                        progress.in_callback = False
            finally:
                await _close(chunks)
            return self._response(target, accumulator.finish())

        return await self._observed(target, attempt, streaming=True)

    async def _observed(
        self, target: CallTarget, attempt: Callable[[_Progress], Awaitable[LLMResponse]], *, streaming: bool
    ) -> LLMResponse:
        """The call with its retries, as one span and one metrics sample (outcome, latency, tokens, cost)."""
        started = time.perf_counter()
        with model_call_span(target.model, streaming=streaming) as span:
            try:
                response = await self._with_retries(target, attempt)
            except LLMError as exc:
                metrics.model_call(target.model, time.perf_counter() - started, error_code=exc.code)
                mark_failed(span, exc.code)
                raise
            except asyncio.CancelledError:
                metrics.model_call(target.model, time.perf_counter() - started, error_code="cancelled")
                raise
            except Exception:
                # What escapes unmapped is the caller's own on_delta failing (see complete_streaming).
                metrics.model_call(target.model, time.perf_counter() - started, error_code="callback_error")
                raise
            metrics.model_call(target.model, time.perf_counter() - started, cost=response.cost)
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": response.cost.input_tokens,
                    "gen_ai.usage.output_tokens": response.cost.output_tokens,
                    "gen_ai.usage.cache_read.input_tokens": response.cost.cache_hit_tokens or 0,
                    "gen_ai.response.finish_reasons": [response.finish_reason or "unknown"],
                    COST_ATTRIBUTE: float(response.cost.cost),
                }
            )
            return response

    async def _with_retries(
        self, target: CallTarget, attempt: Callable[[_Progress], Awaitable[LLMResponse]]
    ) -> LLMResponse:
        retries = 0
        while True:
            progress = _Progress()
            try:
                return await attempt(progress)
            except Exception as exc:
                if progress.in_callback:
                    raise
                error = map_exception(exc, secrets=self._secrets)
                if progress.delivered or not self.retry.should_retry(error, retries):
                    raise error from exc
            await self._backoff(target, error, retries)
            retries += 1

    def _response(self, target: CallTarget, parsed: ParsedMessage) -> LLMResponse:
        return LLMResponse(
            model=target.model,
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            usage=parsed.usage,
            cost=self.costs.cost(target.model, parsed.usage),
            finish_reason=parsed.finish_reason,
            is_demo=target.is_demo,
            reasoning=parsed.reasoning,
        )

    async def _backoff(self, target: CallTarget, error: LLMError, retries_done: int) -> None:
        delay = self.retry.delay(error, retries_done, self._rng)
        logger.warning(
            "model call failed, retrying: model=%s error=%s provider_status=%s retry=%d/%d delay=%.3fs",
            target.model,
            error.code,
            error.provider_status,
            retries_done + 1,
            self.retry.max_retries,
            delay,
        )
        await asyncio.sleep(delay)
