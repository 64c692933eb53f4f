"""The stub itself behaves like the DeepSeek API, checked with a plain HTTP client (no LiteLLM)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from tests.stubs.deepseek_stub import DeepSeekStub, StubFault, StubReply, StubToolCall, StubUsage

AUTH = {"Authorization": "Bearer sk-stub-key"}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "deepseek-chat", "messages": [{"role": "user", "content": "Reply in json please"}], **extra}


async def post(stub: DeepSeekStub, payload: Any, headers: dict[str, str] = AUTH, path: str = "/chat/completions"):
    async with (
        aiohttp.ClientSession() as session,
        session.post(stub.base_url + path, json=payload, headers=headers) as r,
    ):
        return r.status, dict(r.headers), await r.read()


def sse_chunks(raw: bytes) -> list[Any]:
    events = [line.removeprefix("data: ") for line in raw.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


async def test_json_schema_response_format_is_rejected_like_deepseek(stub: DeepSeekStub) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    status, _, raw = await post(stub, body(response_format=fmt))
    assert status == 400
    assert json.loads(raw) == {
        "error": {
            "message": "This response_format type is unavailable now",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }


async def test_json_object_needs_the_word_json_in_the_prompt(stub: DeepSeekStub) -> None:
    payload = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]}
    status, _, raw = await post(stub, {**payload, "response_format": {"type": "json_object"}})
    assert status == 400
    assert "json" in json.loads(raw)["error"]["message"]
    status, _, _ = await post(stub, body(response_format={"type": "json_object"}))
    assert status == 200


async def test_wrong_key_unknown_model_and_broken_body(stub: DeepSeekStub) -> None:
    assert (await post(stub, body(), headers={"Authorization": "Bearer nope"}))[0] == 401
    status, _, raw = await post(stub, body(model="deepseek-3.2"))
    assert (status, json.loads(raw)["error"]["message"]) == (400, "Model Not Exist")
    url = stub.base_url + "/chat/completions"
    async with aiohttp.ClientSession() as session, session.post(url, data=b"{oops", headers=AUTH) as response:
        assert response.status == 400
    assert stub.requests[-1].body is None


async def test_non_streaming_answer_with_tool_calls_and_usage(stub: DeepSeekStub) -> None:
    stub.cache_hit_tokens = 2
    call = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "2+3"}')
    stub.enqueue(
        StubReply(
            content="", tool_calls=[call], usage=StubUsage(prompt_tokens=10, completion_tokens=4, cache_hit_tokens=6)
        )
    )
    status, _, raw = await post(stub, body(), path="/v1/chat/completions")
    answer = json.loads(raw)
    assert status == 200
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]
    assert answer["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 6},
        "prompt_cache_hit_tokens": 6,
        "prompt_cache_miss_tokens": 4,
    }
    recorded = stub.requests[-1]
    assert (recorded.path, recorded.body, recorded.headers["Authorization"]) == (
        "/v1/chat/completions",
        body(),
        "Bearer sk-stub-key",
    )


async def test_stream_has_usage_on_last_chunk_only_when_asked(stub: DeepSeekStub) -> None:
    stub.cache_hit_tokens = 3
    stub.enqueue(StubReply(content="abcdefghij", chunk_chars=4), StubReply(content="abcdefghij", chunk_chars=4))
    _, headers, raw = await post(stub, body(stream=True))
    chunks = sse_chunks(raw)
    assert headers["Content-Type"].startswith("text/event-stream")
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "abcd", "efgh", "ij", ""]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, None, "stop"]
    assert all("usage" not in c for c in chunks)

    _, _, raw = await post(stub, body(stream=True, stream_options={"include_usage": True}))
    chunks = sse_chunks(raw)
    assert all("usage" not in c for c in chunks[:-1])
    usage = chunks[-1]["usage"]
    assert (usage["prompt_cache_hit_tokens"], usage["prompt_tokens_details"]) == (3, {"cached_tokens": 3})
    assert usage["prompt_cache_miss_tokens"] == usage["prompt_tokens"] - 3


async def test_injected_status_fault_carries_retry_after_and_is_consumed_once(stub: DeepSeekStub) -> None:
    stub.enqueue(StubFault(kind="status", status=429, retry_after="7", message="Rate limit reached"))
    status, headers, raw = await post(stub, body())
    assert (status, headers["Retry-After"], json.loads(raw)["error"]["message"]) == (429, "7", "Rate limit reached")
    assert (await post(stub, body()))[0] == 200
    assert len(stub.requests) == 2
