"""Reading LiteLLM's responses and stream chunks into our models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_runtime.engine.billing.models import LLMUsage
from agent_runtime.engine.llm.errors import LLMInvalidResponseError, LLMStreamInterruptedError
from agent_runtime.engine.llm.models import LLMTextDelta, LLMToolCall, LLMToolCallDelta


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def usage_from_litellm(raw: Any) -> LLMUsage | None:
    """DeepSeek's `prompt_cache_hit/miss_tokens` when present, else OpenAI's `prompt_tokens_details.cached_tokens`.

    LiteLLM drops DeepSeek's own names on streamed usage; there the miss count is derived as prompt - hit
    (DeepSeek guarantees hit + miss = prompt), so streamed and non-streamed calls report the same usage.
    """
    if raw is None:
        return None
    prompt = _int_or_none(getattr(raw, "prompt_tokens", None)) or 0
    completion = _int_or_none(getattr(raw, "completion_tokens", None)) or 0
    total = _int_or_none(getattr(raw, "total_tokens", None)) or prompt + completion
    hit = _int_or_none(getattr(raw, "prompt_cache_hit_tokens", None))
    if hit is None:
        hit = _int_or_none(getattr(getattr(raw, "prompt_tokens_details", None), "cached_tokens", None))
    miss = _int_or_none(getattr(raw, "prompt_cache_miss_tokens", None))
    if hit is not None and miss is None and hit <= prompt:
        miss = prompt - hit
    return LLMUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
    )


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    content: str
    tool_calls: list[LLMToolCall]
    finish_reason: str | None
    usage: LLMUsage | None


def parse_completion(raw: Any) -> ParsedMessage:
    choices = getattr(raw, "choices", None)
    if not choices:
        raise LLMInvalidResponseError(provider_message="completion without choices")
    choice = choices[0]
    message = choice.message
    tool_calls = [
        LLMToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
        for call in (getattr(message, "tool_calls", None) or [])
    ]
    return ParsedMessage(
        content=message.content or "",
        tool_calls=tool_calls,
        finish_reason=choice.finish_reason,
        usage=usage_from_litellm(getattr(raw, "usage", None)),
    )


@dataclass(slots=True)
class _ToolCallBuffer:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Collects a streamed answer while handing each piece on as an event."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._tools: dict[int, _ToolCallBuffer] = {}
        self._finish_reason: str | None = None
        self._usage: Any = None

    def feed(self, chunk: Any) -> list[LLMTextDelta | LLMToolCallDelta]:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = usage
        events: list[LLMTextDelta | LLMToolCallDelta] = []
        for choice in getattr(chunk, "choices", None) or ():
            delta = choice.delta
            if delta.content:
                self._text.append(delta.content)
                events.append(LLMTextDelta(text=delta.content))
            for call in getattr(delta, "tool_calls", None) or ():
                events.append(self._feed_tool_call(call))
            if choice.finish_reason:
                self._finish_reason = choice.finish_reason
        return events

    def _feed_tool_call(self, call: Any) -> LLMToolCallDelta:
        index = call.index if isinstance(call.index, int) else len(self._tools)
        buffer = self._tools.setdefault(index, _ToolCallBuffer())
        function = call.function
        name = getattr(function, "name", None) if function is not None else None
        arguments = (getattr(function, "arguments", None) or "") if function is not None else ""
        buffer.id = buffer.id or call.id
        buffer.name = buffer.name or name
        buffer.arguments.append(arguments)
        return LLMToolCallDelta(index=index, id=call.id, name=name, arguments_delta=arguments)

    def finish(self) -> ParsedMessage:
        if self._finish_reason is None:
            raise LLMStreamInterruptedError(provider_message="stream ended without a finish_reason")
        tool_calls = []
        for index in sorted(self._tools):
            buffer = self._tools[index]
            if buffer.id is None or buffer.name is None:
                raise LLMInvalidResponseError(provider_message=f"streamed tool call {index} has no id or name")
            tool_calls.append(LLMToolCall(id=buffer.id, name=buffer.name, arguments="".join(buffer.arguments) or "{}"))
        return ParsedMessage(
            content="".join(self._text),
            tool_calls=tool_calls,
            finish_reason=self._finish_reason,
            usage=usage_from_litellm(self._usage),
        )
