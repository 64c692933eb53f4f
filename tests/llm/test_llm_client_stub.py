"""LLMClient against the DeepSeek stub: answers, usage, cost, streaming and JSON mode."""

from __future__ import annotations

import asyncio
import json
import logging
from decimal import Decimal

import pytest
from tests.llm.conftest import PEAK_ENTRY, MakeClient
from tests.stubs.deepseek_stub import DeepSeekStub, StubReply, StubToolCall, StubUsage

from agent_runtime.engine.billing import CostBreakdown, LLMUsage
from agent_runtime.engine.llm import (
    FunctionSpec,
    LLMClient,
    LLMRequest,
    LLMResponse,
    LLMToolCall,
    ToolSchema,
    WireMessage,
)
from agent_runtime.engine.llm.call_builder import JSON_HINT
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.settings import Settings

# Thinking off, as every stage ships (DeepSeek thinks unless told not to).
HELLO = LLMRequest(messages=[WireMessage(role="user", content="hello")], thinking=False)
CALCULATOR = ToolSchema(
    function=FunctionSpec(
        name="calculator", parameters={"type": "object", "properties": {"expression": {"type": "string"}}}
    )
)


async def test_complete_returns_whole_response_with_precise_cost(stub: DeepSeekStub, make_client: MakeClient) -> None:
    usage = StubUsage(prompt_tokens=1000, completion_tokens=200, cache_hit_tokens=600)
    stub.enqueue(StubReply(content="Hi there!", usage=usage))
    response = await make_client().complete(HELLO)
    assert response == LLMResponse(
        model="deepseek/deepseek-flash",
        content="Hi there!",
        tool_calls=[],
        usage=LLMUsage(
            prompt_tokens=1000, completion_tokens=200, total_tokens=1200, cache_hit_tokens=600, cache_miss_tokens=400
        ),
        # At peak, 600 * 0.04 + 400 * 2 + 200 * 8 = 2424 CNY per million tokens
        cost=CostBreakdown(
            cost=Decimal("0.002424"),
            cost_source="custom_pricing",
            input_tokens=1000,
            output_tokens=200,
            cache_hit_tokens=600,
            cache_miss_tokens=400,
            price_tier="peak",
            price_effective_from=PEAK_ENTRY,
        ),
        finish_reason="stop",
        is_demo=False,
    )
    sent = stub.requests[-1].body
    assert sent == {
        "model": "deepseek-flash",
        "messages": [{"role": "user", "content": "hello"}],
        "thinking": {"type": "disabled"},
    }


async def test_tool_calls_and_request_options_reach_the_wire(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(StubReply(tool_calls=[StubToolCall(id="call_7", name="calculator", arguments='{"expression":"2+3"}')]))
    request = LLMRequest(
        model="deepseek-flash",
        messages=[WireMessage(role="system", content="be brief"), WireMessage(role="user", content="2+3?")],
        tools=[CALCULATOR],
        tool_choice="auto",
        temperature=0.5,
        max_tokens=64,
    )
    response = await make_client().complete(request)
    assert response.tool_calls == [LLMToolCall(id="call_7", name="calculator", arguments='{"expression":"2+3"}')]
    assert (response.content, response.finish_reason, response.model) == ("", "tool_calls", "deepseek/deepseek-flash")
    sent = stub.requests[-1].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
            },
        }
    ]
    assert (sent["tool_choice"], sent["temperature"], sent["max_tokens"]) == ("auto", 0.5, 64)


async def test_stream_delivers_deltas_incrementally_then_the_final(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(StubReply(content="one two three four five", chunk_chars=5))
    hold = stub.hold_replies()
    await hold.allow(2)  # the head and role chunk, then "one t"; the rest waits for the test
    received: list[str] = []
    first = asyncio.Event()

    async def on_delta(text: str) -> bool:
        received.append(text)
        first.set()
        return True

    streaming = asyncio.create_task(make_client().complete_streaming(HELLO, on_delta))
    async with asyncio.timeout(30):
        await first.wait()
    # The first piece is ours while the provider still holds the others.
    assert (received, streaming.done()) == (["one t"], False)
    await hold.release()
    response = await streaming
    assert received == ["one t", "wo th", "ree f", "our f", "ive"]
    assert response.content == "one two three four five"


async def test_stream_usage_is_read_from_the_last_chunk(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(
        StubReply(content="streamed", usage=StubUsage(prompt_tokens=50, completion_tokens=5, cache_hit_tokens=20))
    )
    pieces: list[str] = []

    async def on_delta(text: str) -> bool:
        pieces.append(text)
        return True

    response = await make_client().complete_streaming(HELLO, on_delta)
    assert (pieces, response.content) == (["stre", "amed"], "streamed")
    assert response.usage == LLMUsage(
        prompt_tokens=50, completion_tokens=5, total_tokens=55, cache_hit_tokens=20, cache_miss_tokens=30
    )
    assert response.cost.cost == Decimal("0.0001008")  # at peak, 20 * 0.04 + 30 * 2 + 5 * 8 = 100.8
    assert stub.requests[-1].body["stream_options"] == {"include_usage": True}


async def test_streamed_tool_call_is_assembled(stub: DeepSeekStub, make_client: MakeClient) -> None:
    # The stub streams the call in three pieces: id and name with empty arguments, then the arguments in two.
    stub.enqueue(StubReply(tool_calls=[StubToolCall(id="call_9", name="current_time", arguments='{"tz": "UTC"}')]))
    response = await make_client().complete_streaming(HELLO.model_copy(update={"tools": [CALCULATOR]}))
    assert response.tool_calls == [LLMToolCall(id="call_9", name="current_time", arguments='{"tz": "UTC"}')]
    assert (response.content, response.finish_reason) == ("", "tool_calls")


async def test_json_mode_sends_json_object_and_adds_the_json_hint_when_missing(
    stub: DeepSeekStub, make_client: MakeClient
) -> None:
    stub.enqueue_json({"ok": True})
    response = await make_client().complete(HELLO.model_copy(update={"json_mode": True}))
    assert json.loads(response.content) == {"ok": True}
    sent = stub.requests[-1].body
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["messages"] == [{"role": "user", "content": "hello"}, {"role": "system", "content": JSON_HINT}]


async def test_json_mode_leaves_prompts_that_mention_json_alone(stub: DeepSeekStub, make_client: MakeClient) -> None:
    request = LLMRequest(messages=[WireMessage(role="user", content="Give me JSON.")], json_mode=True)
    await make_client().complete(request)
    assert stub.requests[-1].body["messages"] == [{"role": "user", "content": "Give me JSON."}]


async def test_complete_with_stream_flag_streams_on_the_wire(stub: DeepSeekStub, make_client: MakeClient) -> None:
    response = await make_client().complete(HELLO.model_copy(update={"stream": True}))
    assert response.content == "stub answer to: hello"
    assert stub.requests[-1].body["stream"] is True


async def test_litellms_placeholder_warning_for_answers_without_reasoning_is_filtered(
    stub: DeepSeekStub, make_client: MakeClient
) -> None:
    """Pins `litellm._logging.verbose_logger` (engine/llm/litellm_import.py): with thinking on, LiteLLM warns once per
    history answer that has no reasoning (answers without tool calls never do) and sends a placeholder; the
    warning is not actionable and would flood the logs."""
    from litellm._logging import verbose_logger

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    verbose_logger.addHandler(keep)
    try:
        history = [
            WireMessage(role="user", content="hi"),
            WireMessage(role="assistant", content="hello"),
            WireMessage(role="user", content="and now?"),
        ]
        await make_client().complete(LLMRequest(messages=history, thinking=True))
    finally:
        verbose_logger.removeHandler(keep)
    sent = stub.requests[-1].body["messages"][1]
    assert sent == {"role": "assistant", "content": "hello", "reasoning_content": " "}  # LiteLLM's placeholder
    assert [r.getMessage() for r in records if "reasoning_content" in r.getMessage()] == []


async def test_prime_takes_litellms_first_call_path_without_sending_anything(
    stub: DeepSeekStub, make_client: MakeClient, demo_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # The warm-up runs it on its own thread (engine/runs/warmup.py).
    await asyncio.to_thread(make_client().prime)
    await asyncio.to_thread(LLMClient(demo_settings).prime)
    assert stub.requests == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_prime_that_fails_is_only_logged(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(**kwargs: object) -> object:
        raise RuntimeError("LiteLLM moved mock_response")

    client = make_client()
    monkeypatch.setattr(load_litellm(), "completion", broken)
    client.prime()
    assert [r.getMessage() for r in caplog.records] == [
        "could not prime LiteLLM: the first model call pays its first-call costs"
    ]
