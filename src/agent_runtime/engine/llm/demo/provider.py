"""The offline demo model `demo/agent`: a LiteLLM custom provider, so it runs through the same path as a real one.

Imports LiteLLM at module level (it subclasses `CustomLLM`): import this module lazily, as `CallBuilder` does.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, cast

from pydantic import TypeAdapter

from agent_runtime.engine.llm.demo.stages import DemoAnswer, demo_answer
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.models import ToolSchema, WireMessage

if TYPE_CHECKING:
    # Only for LiteLLM's CustomLLM signature: the demo model makes no HTTP requests at all.
    import httpx

# Before any `litellm.*` import: load_litellm() switches LiteLLM to its bundled (offline) price map.
load_litellm()

from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler  # noqa: E402
from litellm.llms.custom_llm import CustomLLM  # noqa: E402
from litellm.types.llms.openai import (  # noqa: E402
    ChatCompletionToolCallChunk,
    ChatCompletionToolCallFunctionChunk,
    ChatCompletionUsageBlock,
)
from litellm.types.utils import GenericStreamingChunk, ModelResponse  # noqa: E402

PROVIDER = "demo"
_MESSAGES = TypeAdapter(list[WireMessage])
_TOOLS = TypeAdapter(list[ToolSchema])
_TOKEN = re.compile(r"[\u3400-\u9fff]|\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Deterministic stand-in for a tokenizer: words, CJK characters and punctuation marks."""
    return len(_TOKEN.findall(text))


def _as_text(message: Any) -> Any:
    """A message whose content is blocks (text and `image_url`, call_builder's image parts) with its images named
    in its text, so the demo's answers show what reached the model."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    texts = [str(part.get("text", "")) for part in content if part.get("type") == "text"]
    urls = [str(part["image_url"]["url"]) for part in content if part.get("type") == "image_url"]
    kinds = [url.split(";", 1)[0].removeprefix("data:") if url.startswith("data:") else "image URL" for url in urls]
    return {**message, "content": " ".join([*texts, *(f"[image: {kind}]" for kind in kinds)])}


def _answer(messages: list[Any], optional_params: dict[str, Any]) -> DemoAnswer:
    wire = _MESSAGES.validate_python(messages)
    # Offered with tool_choice "none" (every call carries the run's tools: runs/gateway/gateway.py), they cannot
    # be called.
    callable_tools = optional_params.get("tool_choice") != "none"
    tools = _TOOLS.validate_python(optional_params.get("tools") or []) if callable_tools else []
    response_format = optional_params.get("response_format")
    json_mode = isinstance(response_format, dict) and response_format.get("type") == "json_object"
    return demo_answer(wire, tools, json_mode)


def _usage(messages: list[Any], answer: DemoAnswer) -> ChatCompletionUsageBlock:
    prompt = sum(count_tokens(m.get("content") or "") + 4 for m in messages if isinstance(m, dict))
    completion = (
        count_tokens(answer.reasoning)
        + count_tokens(answer.content)
        + sum(count_tokens(c.function.name + c.function.arguments) for c in answer.tool_calls)
    )
    return ChatCompletionUsageBlock(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


class DemoModel(CustomLLM):
    def __init__(self, *, chunk_chars: int = 8, chunk_delay_seconds: float = 0.0) -> None:
        super().__init__()
        self.chunk_chars = chunk_chars
        self.chunk_delay_seconds = chunk_delay_seconds

    async def acompletion(
        self,
        model: str,
        messages: list[Any],
        api_base: str,
        custom_prompt_dict: dict[str, Any],
        model_response: ModelResponse,
        print_verbose: Callable[..., Any],
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict[str, Any],
        acompletion: Any = None,
        litellm_params: Any = None,
        logger_fn: Any = None,
        headers: Any = None,
        timeout: float | httpx.Timeout | None = None,  # noqa: ASYNC109  # LiteLLM's CustomLLM signature
        client: AsyncHTTPHandler | None = None,
    ) -> ModelResponse:
        messages = [_as_text(m) for m in messages]
        answer = _answer(messages, optional_params)
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if answer.reasoning:
            message["reasoning_content"] = answer.reasoning
        if answer.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in answer.tool_calls]
        usage = dict(_usage(messages, answer))
        finish_reason = "tool_calls" if answer.tool_calls else "stop"
        response: ModelResponse = load_litellm().ModelResponse(
            model=f"{PROVIDER}/{model}",
            choices=[{"index": 0, "message": message, "finish_reason": finish_reason}],
            usage=usage,
        )
        return response

    async def astreaming(  # type: ignore[override,misc]  # an async generator, which the base's stub cannot express
        self,
        model: str,
        messages: list[Any],
        api_base: str,
        custom_prompt_dict: dict[str, Any],
        model_response: ModelResponse,
        print_verbose: Callable[..., Any],
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict[str, Any],
        acompletion: Any = None,
        litellm_params: Any = None,
        logger_fn: Any = None,
        headers: Any = None,
        timeout: float | httpx.Timeout | None = None,  # noqa: ASYNC109  # LiteLLM's CustomLLM signature
        client: AsyncHTTPHandler | None = None,
    ) -> AsyncIterator[GenericStreamingChunk]:
        messages = [_as_text(m) for m in messages]
        answer = _answer(messages, optional_params)
        for start in range(0, len(answer.reasoning), self.chunk_chars):
            # Our stream reader takes `reasoning_content` from a chunk (as DeepSeek's reasoner sends it).
            thought = GenericStreamingChunk(text="", is_finished=False, finish_reason="", usage=None, index=0)
            yield cast(
                "GenericStreamingChunk",
                {**thought, "reasoning_content": answer.reasoning[start : start + self.chunk_chars]},
            )
        text = answer.content
        for start in range(0, len(text), self.chunk_chars):
            yield GenericStreamingChunk(
                text=text[start : start + self.chunk_chars], is_finished=False, finish_reason="", usage=None, index=0
            )
            # Gives the consumer (an SSE writer) a turn between pieces, as a network stream would.
            await asyncio.sleep(self.chunk_delay_seconds)
        for index, call in enumerate(answer.tool_calls):
            function = ChatCompletionToolCallFunctionChunk(name=call.function.name, arguments=call.function.arguments)
            tool_use = ChatCompletionToolCallChunk(id=call.id, type="function", function=function, index=index)
            yield GenericStreamingChunk(
                text="", tool_use=tool_use, is_finished=False, finish_reason="", usage=None, index=0
            )
        yield GenericStreamingChunk(
            text="",
            is_finished=True,
            finish_reason="tool_calls" if answer.tool_calls else "stop",
            usage=_usage(messages, answer),
            index=0,
        )


def ensure_demo_provider() -> DemoModel:
    """Registers the demo provider with LiteLLM once per process and returns it."""
    litellm = load_litellm()
    for entry in litellm.custom_provider_map:
        if entry.get("provider") == PROVIDER and isinstance(entry.get("custom_handler"), DemoModel):
            handler: DemoModel = entry["custom_handler"]
            return handler
    handler = DemoModel()
    litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": handler})
    return handler
