"""`LLMClient`: the one entry point for model calls (LiteLLM `acompletion`, our retries, usage and cost)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

from agent_runtime.engine.billing.cost import CostCalculator
from agent_runtime.engine.billing.pricing import PricingTable
from agent_runtime.engine.llm.call_builder import CallBuilder, CallTarget
from agent_runtime.engine.llm.errors import LLMError, map_exception
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.models import LLMRequest, LLMResponse, LLMStreamEnd, LLMStreamEvent, LLMTextDelta
from agent_runtime.engine.llm.responses import ParsedMessage, StreamAccumulator, parse_completion
from agent_runtime.engine.llm.retry import RetryPolicy
from agent_runtime.settings import Settings

logger = logging.getLogger(__name__)

OnDelta = Callable[[str], Awaitable[None]]


class LLMClient:
    """Build one per process and share it; it holds no per-call state.

    Timeouts: `llm_connect_timeout_seconds` bounds connecting; `llm_timeout_seconds` bounds a whole
    non-streamed call, and for a stream the wait for each chunk (a total bound would cut long answers).
    """

    def __init__(self, settings: Settings, *, pricing: PricingTable | None = None, rng: random.Random | None = None):
        self.settings = settings
        self.builder = CallBuilder(settings)
        self.retry = RetryPolicy.from_settings(settings)
        self.costs = CostCalculator(pricing or PricingTable.load(settings.pricing_file))
        self._rng = rng or random.Random()
        self._timeout = settings.llm_timeout_seconds
        self._secrets = self.builder.secrets()
        # Looked up once: attribute access on the litellm module is measurable at this call rate.
        self._acompletion: Callable[..., Awaitable[Any]] = load_litellm().acompletion

    @property
    def default_model(self) -> str:
        return self.settings.effective_llm_model

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.stream:
            return await self.complete_streaming(request)
        target = self.builder.target(request.model)
        kwargs = self.builder.kwargs(request, target, stream=False)
        retries = 0
        while True:
            try:
                async with asyncio.timeout(self._timeout):
                    raw = await self._acompletion(**kwargs)
                return self._response(target, parse_completion(raw))
            except Exception as exc:
                error = map_exception(exc, secrets=self._secrets)
                if not self.retry.should_retry(error, retries):
                    raise error from exc
            await self._backoff(target, error, retries)
            retries += 1

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Text and tool-call deltas as they arrive, then one `LLMStreamEnd` with the whole response."""
        target = self.builder.target(request.model)
        kwargs = self.builder.kwargs(request, target, stream=True)
        retries = 0
        while True:
            delivered = False
            try:
                async with aclosing(self._stream_once(target, kwargs)) as events:
                    async for event in events:
                        delivered = True
                        yield event
                return
            except Exception as exc:
                error = map_exception(exc, secrets=self._secrets)
                if delivered or not self.retry.should_retry(error, retries):
                    raise error from exc
            await self._backoff(target, error, retries)
            retries += 1

    async def complete_streaming(self, request: LLMRequest, on_delta: OnDelta | None = None) -> LLMResponse:
        """Streams the call, awaiting `on_delta(text)` for every text piece; returns the whole response."""
        async for event in self.stream(request):
            if isinstance(event, LLMTextDelta):
                if on_delta is not None:
                    await on_delta(event.text)
            elif isinstance(event, LLMStreamEnd):
                return event.response
        raise AssertionError("stream() always ends with LLMStreamEnd or raises")

    async def _stream_once(self, target: CallTarget, kwargs: dict[str, Any]) -> AsyncGenerator[LLMStreamEvent, None]:
        accumulator = StreamAccumulator()
        async with asyncio.timeout(self._timeout):
            chunks = await self._acompletion(**kwargs)
        iterator = chunks.__aiter__()
        try:
            while True:
                try:
                    async with asyncio.timeout(self._timeout):
                        chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                for event in accumulator.feed(chunk):
                    yield event
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
        yield LLMStreamEnd(response=self._response(target, accumulator.finish()))

    def _response(self, target: CallTarget, parsed: ParsedMessage) -> LLMResponse:
        return LLMResponse(
            model=target.model,
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            usage=parsed.usage,
            cost=self.costs.cost(target.model, parsed.usage),
            finish_reason=parsed.finish_reason,
            is_demo=target.is_demo,
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
