"""`LLMClient`: the one entry point for model calls (LiteLLM `acompletion`, our retries, usage and cost)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from agent_runtime.engine.billing.cost import CostCalculator
from agent_runtime.engine.billing.pricing import PricingTable
from agent_runtime.engine.llm.call_builder import CallBuilder, CallTarget
from agent_runtime.engine.llm.catalog import ModelCatalog
from agent_runtime.engine.llm.errors import (
    LLMError,
    LLMUnavailableError,
    map_exception,
)
from agent_runtime.engine.llm.fallbacks import FallbackAnswer, FallbackChains
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.models import LLMRequest, LLMResponse, WireMessage
from agent_runtime.engine.llm.responses import ParsedMessage, StreamAccumulator, parse_completion
from agent_runtime.engine.llm.retry import OverloadWait, RetryPolicy, is_overload
from agent_runtime.engine.llm.unfinished import OnUnfinished, report_unfinished
from agent_runtime.engine.llm.vision import image_models
from agent_runtime.observability import metrics
from agent_runtime.observability.tracing import COST_ATTRIBUTE, FALLBACK_FROM_ATTRIBUTE, mark_failed, model_call_span
from agent_runtime.settings import Settings

logger = logging.getLogger(__name__)

OnDelta = Callable[[str], Awaitable[bool]]
"""Takes a piece of streamed text; returns whether anything of it reached the caller's own client. A call
is retried only while nothing has: a piece the caller kept to itself (say, JSON around the answer) does not
count as delivered."""


Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Progress:
    """What one attempt has done that decides whether it may be retried."""

    delivered: bool = False
    in_callback: bool = False
    first_text: bool = False


class _Exhausted(Exception):
    """The retries of a call ran out on `error`, a retryable one: what falls back."""

    def __init__(self, error: LLMError) -> None:
        super().__init__(error.code)
        self.error = error


Caller = Callable[[dict[str, Any]], Awaitable[FallbackAnswer]]
"""Sends one attempt's kwargs: to the call's own model, or along its fallback chain (the Router)."""


def _provider_chunks(stream: Any) -> Any:
    """The provider's own chunk iterator inside LiteLLM's `CustomStreamWrapper` (the stream itself if none).

    The call is still LiteLLM's (request building, auth, HTTP, SSE framing, the provider's chunk parser,
    in-band error chunks); only the wrapper is skipped. It rebuilds every chunk (a new ModelResponseStream,
    hidden params, logging hooks) and the whole response at the end, none of which we use, at several times
    the CPU of the iterator it wraps; it was over half of an agent run's CPU (docs/benchmarks.md, "LLM overhead").
    What the wrapper added that we need is done here: usage is on the last
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

    Retries (429, 5xx, timeouts, connection errors, unreadable answers; never other 4xx) happen only while
    nothing has been delivered: once a streamed piece reached the caller's client (`OnDelta` says so), a
    failure is raised as it is. A 429 is waited out for up to `llm_overload_wait_seconds`, the others are retried
    `llm_max_retries` times (`retry.py`). When those are spent on a retryable error, the call goes along its
    model's fallback chain (`fallbacks.py`), which gets the same; when that fails too, `LLMUnavailableError`.

    Every answer is priced at the start of the attempt that gave it, by the model that gave it. An attempt cut
    after the provider began to answer (a dropped stream, a timeout, an unreadable body, a cancel) is reported
    to `on_unfinished` with an estimated usage: the prompt counted here, the output as far as it streamed.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        pricing: PricingTable | None = None,
        catalog: ModelCatalog | None = None,
        rng: random.Random | None = None,
        acompletion: Callable[..., Awaitable[Any]] | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`acompletion` replaces `litellm.acompletion` (benchmarks measure this layer alone with it); `clock`
        is when a call starts, for its price (tests pin it)."""
        self.settings = settings
        self.builder = CallBuilder(settings)
        self.retry = RetryPolicy.from_settings(settings)
        self.costs = CostCalculator(
            pricing or PricingTable.load(settings.pricing_file, fallback_per_million=settings.unpriced_model_price_cny)
        )
        self.fallbacks = FallbackChains(
            catalog or ModelCatalog.load(settings.models_file), self.builder, image_models=image_models(settings)
        )
        self._rng = rng or random.Random()
        self._clock = clock or _utc_now
        self._timeout = settings.llm_timeout_seconds
        self._secrets = self.builder.secrets()
        # Looked up once: LiteLLM resolves module attributes lazily, per access.
        self._acompletion: Callable[..., Awaitable[Any]] = acompletion or load_litellm().acompletion

    def prime(self) -> None:
        """Pay LiteLLM's first-call costs now (the warm-up runs this on its own thread), not in the first run.

        LiteLLM's first completion imports ~70 more modules (provider configs, file-id helpers of its proxy, the
        tokenizer): ~0.5-0.7 s of CPU, which the first run after a start paid on top of the ~0.1 s of later ones.
        One completion with LiteLLM's `mock_response` takes the same path (provider lookup, parameter mapping)
        and sends nothing. Synchronous on purpose: it is CPU work, on the warm-up's thread, never on the loop.
        Only a speed-up: should a LiteLLM upgrade break it, the first run pays again, and nothing else changes."""
        target = self.builder.target(None)
        request = LLMRequest(messages=[WireMessage(role="user", content="warm-up")])
        try:
            for _ in load_litellm().completion(**self.builder.kwargs(request, target, stream=True), mock_response="ok"):
                pass
        except Exception:
            logger.warning("could not prime LiteLLM: the first model call pays its first-call costs", exc_info=True)

    async def complete(self, request: LLMRequest, *, on_unfinished: OnUnfinished | None = None) -> LLMResponse:
        """One answer; with `request.stream` set it is streamed on the wire and returned whole."""
        if request.stream:
            return await self.complete_streaming(request, on_unfinished=on_unfinished)
        target = self.builder.target(request.model)
        kwargs = self.builder.kwargs(request, target, stream=False)

        async def attempt(_: _Progress, send: Caller) -> LLMResponse:
            started = self._clock()
            try:
                async with asyncio.timeout(self._timeout):
                    answer = await send(kwargs)
                parsed = parse_completion(answer.raw)
            except BaseException as exc:
                report_unfinished(
                    on_unfinished, exc, target, kwargs, "", at=started, costs=self.costs, secrets=self._secrets
                )
                raise
            return self._response(target, answer.model, parsed, started)

        return await self._observed(target, kwargs, attempt, streaming=False)

    async def complete_streaming(
        self,
        request: LLMRequest,
        on_delta: OnDelta | None = None,
        on_retry: Callable[[], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
        *,
        on_unfinished: OnUnfinished | None = None,
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

        async def attempt(progress: _Progress, send: Caller) -> LLMResponse:
            nonlocal attempts
            if attempts and on_retry is not None:
                on_retry()
            attempts += 1
            accumulator = StreamAccumulator()
            at = self._clock()
            try:
                async with asyncio.timeout(self._timeout):
                    answer = await send(kwargs)
                chunks = answer.raw
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
                parsed = accumulator.finish()
            except BaseException as exc:
                report_unfinished(
                    on_unfinished,
                    exc,
                    target,
                    kwargs,
                    accumulator.partial_output(),
                    at=at,
                    costs=self.costs,
                    secrets=self._secrets,
                )
                raise
            return self._response(target, answer.model, parsed, at)

        return await self._observed(target, kwargs, attempt, streaming=True)

    async def _observed(
        self,
        target: CallTarget,
        kwargs: dict[str, Any],
        attempt: Callable[[_Progress, Caller], Awaitable[LLMResponse]],
        *,
        streaming: bool,
    ) -> LLMResponse:
        """The call with its retries, as one span and one metrics sample (outcome, latency, tokens, cost)."""
        started = time.perf_counter()
        with model_call_span(target.model, streaming=streaming) as span:
            try:
                response = await self._with_retries(target, kwargs, attempt)
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
            metrics.model_call(response.model, time.perf_counter() - started, cost=response.cost)
            attributes: dict[str, Any] = {
                "gen_ai.response.model": response.model,
                "gen_ai.usage.input_tokens": response.cost.input_tokens,
                "gen_ai.usage.output_tokens": response.cost.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": response.cost.cache_hit_tokens or 0,
                "gen_ai.response.finish_reasons": [response.finish_reason or "unknown"],
                COST_ATTRIBUTE: float(response.cost.cost),
            }
            if response.fallback_from is not None:
                attributes[FALLBACK_FROM_ATTRIBUTE] = response.fallback_from
            span.set_attributes(attributes)
            return response

    async def _with_retries(
        self,
        target: CallTarget,
        kwargs: dict[str, Any],
        attempt: Callable[[_Progress, Caller], Awaitable[LLMResponse]],
    ) -> LLMResponse:
        try:
            return await self._retrying(target, attempt, partial(self._send, target))
        except _Exhausted as spent:
            if not self.fallbacks.chain(target.model, kwargs):
                raise spent.error from spent.__cause__
            return await self._fall_back(target, kwargs, spent.error, attempt)

    async def _retrying(
        self, target: CallTarget, attempt: Callable[[_Progress, Caller], Awaitable[LLMResponse]], send: Caller
    ) -> LLMResponse:
        """`attempt` with `send`, retried while the error is retryable and nothing was delivered (a 429 while its wait
        budget lasts, anything else up to `max_retries` times); `_Exhausted` when the retries or the budget ran out
        on a retryable error (the caller may fall back), the error itself otherwise."""
        retries = 0
        overload = OverloadWait(self.retry)
        while True:
            progress = _Progress()
            try:
                return await attempt(progress, send)
            except Exception as exc:
                if progress.in_callback:
                    raise
                error = map_exception(exc, secrets=self._secrets)
                if progress.delivered or not error.retryable:
                    raise error from exc
                if is_overload(error):
                    delay = overload.next_delay(error, self._rng, time.monotonic())
                elif self.retry.should_retry(error, retries):
                    delay = self.retry.delay(error, retries, self._rng)
                    retries += 1
                else:
                    delay = None
                if delay is None:
                    raise _Exhausted(error) from exc
            await self._backoff(target, error, delay, retries=retries, overload=overload)

    async def _fall_back(
        self,
        target: CallTarget,
        kwargs: dict[str, Any],
        error: LLMError,
        attempt: Callable[[_Progress, Caller], Awaitable[LLMResponse]],
    ) -> LLMResponse:
        """The call on its model's fallback chain, after the model's own retries failed with `error`. The Router
        walks the chain once per attempt; the attempts are retried like the model's own (our backoff, Retry-After)."""
        chain = [t.model for t in self.fallbacks.chain(target.model, kwargs)]
        logger.warning(
            "model call falling back: model=%s error=%s provider_status=%s chain=%s",
            target.model,
            error.code,
            error.provider_status,
            ",".join(chain),
        )
        try:
            response = await self._retrying(target, attempt, partial(self.fallbacks.acompletion, target.model))
        except _Exhausted as spent:
            last = spent.error
            metrics.model_fallback(target.model, None)
            raise LLMUnavailableError(
                provider_status=last.provider_status,
                provider_message=f"{target.model}: {error.code}; fallbacks ({', '.join(chain)}): {last.code}: "
                f"{last.provider_message}",
                retry_after=last.retry_after,
            ) from spent.__cause__
        metrics.model_fallback(target.model, response.model)
        return response

    async def _send(self, target: CallTarget, kwargs: dict[str, Any]) -> FallbackAnswer:
        return FallbackAnswer(model=target.model, raw=await self._acompletion(**kwargs))

    def _response(self, target: CallTarget, model: str, parsed: ParsedMessage, at: datetime) -> LLMResponse:
        return LLMResponse(
            model=model,
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            usage=parsed.usage,
            cost=self.costs.cost(model, parsed.usage, at=at),
            finish_reason=parsed.finish_reason,
            is_demo=target.is_demo,
            reasoning=parsed.reasoning,
            fallback_from=target.model if model != target.model else None,
        )

    async def _backoff(
        self, target: CallTarget, error: LLMError, delay: float, *, retries: int, overload: OverloadWait
    ) -> None:
        if is_overload(error):
            logger.warning(
                "model busy, waiting: model=%s provider_status=%s wait=%d delay=%.3fs budget=%.1fs",
                target.model,
                error.provider_status,
                overload.waits,
                delay,
                self.retry.overload_seconds,
            )
        else:
            logger.warning(
                "model call failed, retrying: model=%s error=%s provider_status=%s retry=%d/%d delay=%.3fs",
                target.model,
                error.code,
                error.provider_status,
                retries,
                self.retry.max_retries,
                delay,
            )
        await asyncio.sleep(delay)
