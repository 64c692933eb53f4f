"""LLMClient reads the provider's chunk iterator inside LiteLLM's stream wrapper: what that relies on, and that
a streamed answer reads exactly as the same answer not streamed."""

from __future__ import annotations

from typing import Any

import pytest
from tests.llm.conftest import MakeClient, stub_settings
from tests.stubs.deepseek_stub import DeepSeekStub, StubReply, StubToolCall, StubUsage

from agent_runtime.engine.llm import LLMClient, LLMRequest, WireMessage
from agent_runtime.engine.llm.call_builder import CallBuilder
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.settings import Settings

HELLO_REQUEST = LLMRequest(messages=[WireMessage(role="user", content="hello")], thinking=False)


async def _wrapper_and_chunks(settings: Settings, request: LLMRequest) -> tuple[Any, list[Any]]:
    builder = CallBuilder(settings)
    target = builder.target(None)
    wrapper = await load_litellm().acompletion(**builder.kwargs(request, target, stream=True))
    try:
        return wrapper, [chunk async for chunk in wrapper.completion_stream]
    finally:
        await wrapper.aclose()


async def test_litellm_stream_wraps_a_provider_iterator_that_keeps_deepseek_usage(stub: DeepSeekStub) -> None:
    """Pins the LiteLLM detail the client depends on (an upgrade that moves it fails here first)."""
    stub.enqueue(
        StubReply(
            content="abcdefgh", chunk_chars=4, usage=StubUsage(prompt_tokens=9, completion_tokens=2, cache_hit_tokens=4)
        )
    )
    wrapper, chunks = await _wrapper_and_chunks(stub_settings(stub), HELLO_REQUEST)
    assert type(wrapper).__name__ == "CustomStreamWrapper"
    texts = [c.choices[0].delta.content for c in chunks if not isinstance(c, dict) and c.choices]
    assert texts == ["", "abcd", "efgh", ""]  # role chunk, content, finish chunk
    usage = next(c.usage for c in chunks if not isinstance(c, dict) and getattr(c, "usage", None))
    assert (usage.prompt_tokens, usage.prompt_cache_hit_tokens, usage.prompt_cache_miss_tokens) == (9, 4, 5)
    # `[DONE]` comes through as LiteLLM's GenericStreamingChunk.
    assert chunks[-1] == {
        "text": "",
        "is_finished": True,
        "finish_reason": "stop",
        "usage": None,
        "index": 0,
        "tool_use": None,
    }


async def test_demo_provider_streams_generic_chunks(demo_settings: Settings) -> None:
    _, chunks = await _wrapper_and_chunks(demo_settings, HELLO_REQUEST)
    assert all(isinstance(chunk, dict) for chunk in chunks)
    assert chunks[-1]["is_finished"] is True
    assert chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize(
    "reply",
    [
        StubReply(
            content="one two three",
            chunk_chars=3,
            usage=StubUsage(prompt_tokens=40, completion_tokens=3, cache_hit_tokens=32),
        ),
        StubReply(tool_calls=[StubToolCall(id="call_1", name="calculator", arguments='{"expression": "1+2"}')]),
    ],
    ids=["text", "tool_call"],
)
async def test_streamed_and_plain_calls_read_the_same(
    stub: DeepSeekStub, make_client: MakeClient, reply: StubReply
) -> None:
    client = make_client()
    stub.enqueue(reply)
    plain = await client.complete(HELLO_REQUEST)
    stub.enqueue(reply)
    streamed = await client.complete_streaming(HELLO_REQUEST)
    assert streamed == plain
    assert [r.body.get("stream", False) for r in stub.requests] == [False, True]


async def test_demo_streamed_and_plain_calls_read_the_same(demo_settings: Settings) -> None:
    client = LLMClient(demo_settings)
    assert await client.complete_streaming(HELLO_REQUEST) == await client.complete(HELLO_REQUEST)


async def test_litellm_does_not_price_our_calls_itself(stub: DeepSeekStub) -> None:
    """litellm_import skips LiteLLM's own pricing of every call (engine/billing prices it from the usage; the
    billing tests check those bills): pinned on a real call, so an upgrade that moves the method fails here
    instead of silently pricing again."""
    stub.enqueue(StubReply(content="priced by us", usage=StubUsage(prompt_tokens=1000, completion_tokens=200)))
    builder = CallBuilder(stub_settings(stub))
    response = await load_litellm().acompletion(**builder.kwargs(HELLO_REQUEST, builder.target(None), stream=False))
    assert response.choices[0].message.content == "priced by us"
    assert response._hidden_params["response_cost"] is None
