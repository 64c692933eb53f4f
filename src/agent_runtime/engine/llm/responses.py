"""Reading LiteLLM's responses and stream chunks into our models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_runtime.engine.billing.models import LLMUsage
from agent_runtime.engine.llm.errors import LLMInvalidResponseError, LLMStreamInterruptedError
from agent_runtime.engine.llm.models import LLMToolCall


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _field(obj: Any, name: str) -> Any:
    # Usage comes as an object from OpenAI-compatible providers and as a plain dict from custom providers.
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def usage_from_litellm(raw: Any) -> LLMUsage | None:
    """DeepSeek's `prompt_cache_hit/miss_tokens` when present, else OpenAI's `prompt_tokens_details.cached_tokens`.

    Where only the OpenAI name arrives (LiteLLM's stream wrapper drops DeepSeek's own names) the miss count
    is derived as prompt - hit (DeepSeek guarantees hit + miss = prompt), so usage reads the same either way.
    """
    if raw is None:
        return None
    prompt = _int_or_none(_field(raw, "prompt_tokens")) or 0
    completion = _int_or_none(_field(raw, "completion_tokens")) or 0
    total = _int_or_none(_field(raw, "total_tokens")) or prompt + completion
    hit = _int_or_none(_field(raw, "prompt_cache_hit_tokens"))
    if hit is None:
        hit = _int_or_none(_field(_field(raw, "prompt_tokens_details"), "cached_tokens"))
    miss = _int_or_none(_field(raw, "prompt_cache_miss_tokens"))
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
    reasoning: str | None = None


def _reasoning_of(delta: Any) -> str | None:
    # A thinking model's `reasoning_content`: LiteLLM sets it as a plain attribute only when present, so the
    # instance dict answers without pydantic's failing __getattr__ on every content chunk.
    fields = getattr(delta, "__dict__", None)
    value = fields.get("reasoning_content") if fields is not None else None
    return value if isinstance(value, str) and value else None


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
        reasoning=_reasoning_of(message),
    )


def _attr(obj: Any, name: str) -> Any:
    # LiteLLM's stream objects keep their fields as pydantic "extra" values, which attribute access reaches
    # only through pydantic's __getattr__: that was a third of our per-chunk cost. Read the extras directly.
    extra = getattr(obj, "__pydantic_extra__", None)
    if extra is not None and name in extra:
        return extra[name]
    return getattr(obj, name, None)


def _chunk_usage(chunk: Any) -> Any:
    # LiteLLM keeps a chunk's usage as a pydantic "extra" attribute that only the last chunk has; a plain
    # getattr on the others goes through pydantic's failing __getattr__, which raises and catches per chunk.
    extra = getattr(chunk, "__pydantic_extra__", None)
    if extra is None:
        return getattr(chunk, "usage", None)
    return extra.get("usage") or chunk.__dict__.get("usage")


@dataclass(slots=True)
class _ToolCallBuffer:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Collects a streamed answer; `feed_text` hands on each chunk's text."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        # The last chunk's reasoning text ("" if none): read after each `feed_text`.
        self.reasoning_delta = ""
        self._tools: dict[int, _ToolCallBuffer] = {}
        self._finish_reason: str | None = None
        self._usage: Any = None

    def feed_text(self, chunk: Any) -> str:
        """The chunk's text ("" if none)."""
        if isinstance(chunk, dict):
            return self._absorb_generic(chunk)
        usage = _chunk_usage(chunk)
        if usage is not None:
            self._usage = usage
        text = ""
        self.reasoning_delta = ""
        for choice in getattr(chunk, "choices", None) or ():
            delta = _attr(choice, "delta")
            reasoning = _reasoning_of(delta)
            if reasoning:
                self._reasoning.append(reasoning)
                self.reasoning_delta += reasoning
            content = _attr(delta, "content")
            if content:
                self._text.append(content)
                text += content
            for call in _attr(delta, "tool_calls") or ():
                self._feed_tool_call(call)
            finish_reason = _attr(choice, "finish_reason")
            if finish_reason:
                self._finish_reason = finish_reason
        return text

    def _absorb_generic(self, chunk: dict[str, Any]) -> str:
        """LiteLLM's `GenericStreamingChunk`: what custom providers yield, and a provider stream's `[DONE]`."""
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        text: str = chunk.get("text") or ""
        if text:
            self._text.append(text)
        reasoning = chunk.get("reasoning_content")
        self.reasoning_delta = reasoning if isinstance(reasoning, str) else ""
        if self.reasoning_delta:
            self._reasoning.append(self.reasoning_delta)
        if chunk.get("tool_use"):
            self._feed_tool_call(chunk["tool_use"])
        # `[DONE]` arrives as is_finished with "stop": it must not overwrite the provider's own reason.
        if chunk.get("is_finished") and self._finish_reason is None:
            self._finish_reason = chunk.get("finish_reason") or "stop"
        return text

    def _feed_tool_call(self, call: Any) -> None:
        index = _field(call, "index")
        index = index if isinstance(index, int) else len(self._tools)
        buffer = self._tools.setdefault(index, _ToolCallBuffer())
        function = _field(call, "function")
        name = _field(function, "name")
        arguments = _field(function, "arguments") or ""
        call_id = _field(call, "id")
        buffer.id = buffer.id or call_id
        buffer.name = buffer.name or name
        buffer.arguments.append(arguments)

    def partial_output(self) -> str:
        """Everything the model produced so far (reasoning, text, tool calls): what an interrupted call was billed."""
        calls = "".join((b.name or "") + "".join(b.arguments) for b in self._tools.values())
        return "".join(self._reasoning) + "".join(self._text) + calls

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
            reasoning="".join(self._reasoning) or None,
        )
