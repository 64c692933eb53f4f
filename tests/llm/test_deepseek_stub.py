"""The stub itself behaves like the DeepSeek API (as documented in December 2026), checked over HTTP with a plain
client (no LiteLLM): models, thinking mode and the reasoning pass-back, user_id, concurrency, JSON Output,
max_tokens, streaming, faults."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from pydantic import BaseModel
from tests.stubs.deepseek_stub import (
    PASSBACK_MESSAGE,
    REPORTED_LAX,
    DeepSeekStub,
    StubFault,
    StubReply,
    StubToolCall,
    StubUsage,
)

AUTH = {"Authorization": "Bearer sk-stub-key"}
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
CALL = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "2+3"}')
STRICT = (
    f"{PASSBACK_MESSAGE} (stub, stricter than DeepSeek: message 1 passes back a reasoning this stub did not send "
    "with it for this API key and user_id)"
)


class HttpReply(BaseModel):
    status: int
    headers: dict[str, str]
    raw: bytes

    def json_body(self) -> Any:
        return json.loads(self.raw)

    def completion(self) -> dict[str, Any]:
        """The answer, its `created` timestamp checked and left out (the rest is deterministic)."""
        answer: dict[str, Any] = self.json_body()
        assert isinstance(answer.pop("created"), int)
        return answer

    def chunks(self) -> list[dict[str, Any]]:
        events = [line.removeprefix("data: ") for line in self.raw.decode().split("\n\n") if line]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        for chunk in chunks:
            assert isinstance(chunk.pop("created"), int)
        return chunks

    def deltas(self) -> list[dict[str, Any]]:
        return [c["choices"][0]["delta"] for c in self.chunks()]


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "deepseek-flash", "messages": [{"role": "user", "content": "Reply in json please"}], **extra}


def error(message: str, err_type: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": None, "code": err_type}}


def usage(prompt: int, completion: int, hit: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": hit},
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": prompt - hit,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


async def post(
    stub: DeepSeekStub, payload: Any, headers: dict[str, str] = AUTH, path: str = "/chat/completions"
) -> HttpReply:
    async with (
        aiohttp.ClientSession() as session,
        session.post(stub.base_url + path, json=payload, headers=headers) as r,
    ):
        return HttpReply(status=r.status, headers=dict(r.headers), raw=await r.read())


def message_of(reply: HttpReply) -> dict[str, Any]:
    assert reply.status == 200, reply.raw
    message: dict[str, Any] = reply.json_body()["choices"][0]["message"]
    return message


# Models


@pytest.mark.parametrize("model", ["deepseek-flash", "deepseek-v4-pro", "deepseek-v4-flash"])
async def test_current_models_answer_in_thinking_mode_by_default(stub: DeepSeekStub, model: str) -> None:
    reply = await post(stub, {"model": model, "messages": [{"role": "user", "content": "hello"}]})
    assert reply.status == 200
    assert reply.completion() == {
        "id": "stub-completion",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "stub answer to: hello",
                    "reasoning_content": "Thinking (high effort) about: hello",
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        # "hello" and 4 per message; the reasoning's 8 tokens count as completion tokens.
        "usage": usage(prompt=5, completion=13, reasoning=8),
        "system_fingerprint": "fp_stub",
    }


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "deepseek-chat",
            "Model Not Exist (deepseek-chat was retired on 2026-07-24; use deepseek-flash or deepseek-v4-pro)",
        ),
        (
            "deepseek-reasoner",
            "Model Not Exist (deepseek-reasoner was retired on 2026-07-24; use deepseek-flash or deepseek-v4-pro)",
        ),
        ("deepseek-v4.1-flash", "Model Not Exist"),
        (None, "Model Not Exist"),
    ],
)
async def test_retired_and_unknown_models_are_refused(stub: DeepSeekStub, model: str | None, message: str) -> None:
    reply = await post(stub, body(model=model))
    assert (reply.status, reply.json_body()) == (400, error(message))


async def test_wrong_key_missing_messages_and_broken_body(stub: DeepSeekStub) -> None:
    reply = await post(stub, body(), headers={"Authorization": "Bearer nope"})
    assert (reply.status, reply.json_body()) == (
        401,
        error("Authentication Fails, Your api key is invalid", "authentication_error"),
    )
    reply = await post(stub, body(messages=[]))
    assert (reply.status, reply.json_body()) == (422, error("messages: field required"))
    url = stub.base_url + "/chat/completions"
    async with aiohttp.ClientSession() as session, session.post(url, data=b"{oops", headers=AUTH) as response:
        assert (response.status, await response.json()) == (400, error("Failed to deserialize the JSON body"))
    assert stub.requests[-1].body is None


# Thinking mode


@pytest.mark.parametrize(
    ("requested", "mapped"),
    [
        ("minimal", "low"),
        ("low", "low"),
        ("medium", "high"),
        ("high", "high"),
        ("xhigh", "high"),
        ("max", "max"),
        ("ultra", "max"),
    ],
)
async def test_reasoning_effort_is_mapped_as_documented(stub: DeepSeekStub, requested: str, mapped: str) -> None:
    reply = await post(stub, body(reasoning_effort=requested, thinking={"type": "enabled"}))
    assert message_of(reply)["reasoning_content"] == f"Thinking ({mapped} effort) about: Reply in json please"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"reasoning_effort": "none"},
            "Invalid reasoning_effort: expected one of minimal, low, medium, high, xhigh, max, ultra",
        ),
        ({"thinking": {"type": "auto"}}, 'Invalid thinking: expected {"type": "enabled"} or {"type": "disabled"}'),
        ({"thinking": True}, 'Invalid thinking: expected {"type": "enabled"} or {"type": "disabled"}'),
    ],
)
async def test_invalid_thinking_parameters_are_refused(stub: DeepSeekStub, extra: dict[str, Any], message: str) -> None:
    reply = await post(stub, body(**extra))
    assert (reply.status, reply.json_body()) == (400, error(message))


async def test_thinking_disabled_answers_without_reasoning(stub: DeepSeekStub) -> None:
    reply = await post(stub, body(thinking={"type": "disabled"}, reasoning_effort="max"))
    answer = reply.completion()
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "stub answer to: Reply in json please"}
    assert answer["usage"] == usage(prompt=8, completion=8)


async def test_scripted_reasoning_for_a_request_without_thinking_is_a_test_bug(stub: DeepSeekStub) -> None:
    stub.enqueue(StubReply(content="hi", reasoning_content="I thought"))
    reply = await post(stub, body(thinking={"type": "disabled"}))
    message = "stub: the scripted reply has reasoning_content but the request disabled thinking"
    assert (reply.status, reply.json_body()) == (400, error(message))


async def test_sampling_parameters_are_accepted_and_ignored_in_thinking_mode(stub: DeepSeekStub) -> None:
    plain = await post(stub, body())
    tuned = await post(stub, body(temperature=1.7, presence_penalty=1.0, frequency_penalty=-1.0))
    assert tuned.status == 200
    assert tuned.completion() == plain.completion()


async def test_streamed_reasoning_comes_before_the_content_and_the_tool_calls(stub: DeepSeekStub) -> None:
    stub.enqueue(StubReply(content="Let me add.", reasoning_content="Use the tool.", tool_calls=[CALL], chunk_chars=6))
    reply = await post(stub, body(stream=True, tools=TOOLS))
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    assert reply.deltas() == [
        {"role": "assistant", "content": ""},
        {"content": None, "reasoning_content": "Use th"},
        {"content": None, "reasoning_content": "e tool"},
        {"content": None, "reasoning_content": "."},
        {"content": "Let me"},
        {"content": " add."},
        {
            "content": None,
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": ""}}
            ],
        },
        {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": '{"expressi'}}]},
        {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": 'on": "2+3"}'}}]},
        {"content": ""},
    ]
    assert [c["choices"][0]["finish_reason"] for c in reply.chunks()][-2:] == [None, "tool_calls"]


# The reasoning of a tool call must be passed back


async def tool_turn(stub: DeepSeekStub, **extra: Any) -> list[dict[str, Any]]:
    """A first request that calls the calculator; the conversation so far, as the client keeps it."""
    question = {"role": "user", "content": "What is 2+3?"}
    stub.enqueue(StubReply(tool_calls=[CALL]))
    called = message_of(await post(stub, body(messages=[question], tools=TOOLS, **extra)))
    return [question, called, {"role": "tool", "tool_call_id": "call_1", "content": "5"}]


async def test_the_tool_calls_reasoning_passed_back_is_accepted(stub: DeepSeekStub) -> None:
    history = await tool_turn(stub, user_id="alice")
    assert history[1]["reasoning_content"] == "Thinking (high effort) about: What is 2+3?"
    reply = await post(stub, body(messages=history, tools=TOOLS, user_id="alice"))
    assert message_of(reply) == {
        "role": "assistant",
        "content": "stub answer to: What is 2+3?",
        "reasoning_content": "Thinking (high effort) about: What is 2+3?",
    }


@pytest.mark.parametrize(
    ("reasoning", "message"),
    [
        (None, PASSBACK_MESSAGE),
        ("", PASSBACK_MESSAGE),
        (" ", STRICT),  # LiteLLM's placeholder when the history lost the reasoning
        ("Some other reasoning.", STRICT),
    ],
)
async def test_a_tool_calls_reasoning_not_passed_back_is_refused(
    stub: DeepSeekStub, reasoning: str | None, message: str
) -> None:
    history = await tool_turn(stub)
    history[1].pop("reasoning_content")
    if reasoning is not None:
        history[1]["reasoning_content"] = reasoning
    reply = await post(stub, body(messages=[*history, {"role": "user", "content": "thanks"}], tools=TOOLS))
    assert (reply.status, reply.json_body()) == (400, error(message))


async def test_without_strict_reasoning_any_non_empty_reasoning_is_taken() -> None:
    async with DeepSeekStub(strict_reasoning=False) as stub:
        history = await tool_turn(stub)
        history[1]["reasoning_content"] = " "
        assert (await post(stub, body(messages=history, tools=TOOLS))).status == 200
        history[1]["reasoning_content"] = ""
        reply = await post(stub, body(messages=history, tools=TOOLS))
        assert (reply.status, reply.json_body()) == (400, error(PASSBACK_MESSAGE))


async def test_another_users_tool_call_reasoning_is_refused(stub: DeepSeekStub) -> None:
    history = await tool_turn(stub, user_id="alice")
    reply = await post(stub, body(messages=history, tools=TOOLS, user_id="bob"))
    assert (reply.status, reply.json_body()) == (400, error(STRICT))
    reply = await post(stub, body(messages=history, tools=TOOLS))
    assert (reply.status, reply.json_body()) == (400, error(STRICT))


async def test_non_thinking_requests_and_turns_without_tool_calls_need_no_reasoning(stub: DeepSeekStub) -> None:
    history = await tool_turn(stub, thinking={"type": "disabled"})
    assert "reasoning_content" not in history[1]
    assert (await post(stub, body(messages=history, tools=TOOLS, thinking={"type": "disabled"}))).status == 200

    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ]
    assert (await post(stub, body(messages=chat))).status == 200


# In a request with tools, every earlier assistant message passes back its reasoning


async def answered_turn(stub: DeepSeekStub, content: str, **extra: Any) -> list[dict[str, Any]]:
    """A first request answered without tool calls, and the user's next message."""
    question = {"role": "user", "content": "Hi"}
    stub.enqueue(StubReply(content=content))
    answer = message_of(await post(stub, body(messages=[question], tools=TOOLS, **extra)))
    return [question, answer, {"role": "user", "content": "And now?"}]


async def test_an_answers_reasoning_passed_back_is_accepted_and_its_placeholder_refused(stub: DeepSeekStub) -> None:
    history = await answered_turn(stub, "Hello!")
    assert history[1]["reasoning_content"] == "Thinking (high effort) about: Hi"
    assert (await post(stub, body(messages=history, tools=TOOLS))).status == 200
    history[1]["reasoning_content"] = " "
    reply = await post(stub, body(messages=history, tools=TOOLS))
    assert (reply.status, reply.json_body()) == (400, error(STRICT))
    history[1].pop("reasoning_content")
    reply = await post(stub, body(messages=history, tools=TOOLS))
    assert (reply.status, reply.json_body()) == (400, error(PASSBACK_MESSAGE))
    # Without tools an answer's reasoning is not needed (DeepSeek ignores it).
    assert (await post(stub, body(messages=history))).status == 200


async def test_an_answer_is_known_by_a_text_inside_its_json(stub: DeepSeekStub) -> None:
    history = await answered_turn(stub, json.dumps({"answer": 'She said "hi"\nthen left.', "route": "DIRECT"}))
    history[1]["content"] = 'She said "hi"\nthen left.'
    reply = await post(stub, body(messages=history, tools=TOOLS))
    assert reply.status == 200
    history[1]["reasoning_content"] = "Some other reasoning."
    reply = await post(stub, body(messages=history, tools=TOOLS))
    assert (reply.status, reply.json_body()) == (400, error(STRICT))


async def test_a_placeholder_passes_for_messages_answered_without_thinking(stub: DeepSeekStub) -> None:
    for history in (
        await answered_turn(stub, "Hello!", thinking={"type": "disabled"}),
        await tool_turn(stub, thinking={"type": "disabled"}),
    ):
        history[1]["reasoning_content"] = " "  # what LiteLLM injects in thinking mode
        assert (await post(stub, body(messages=history, tools=TOOLS))).status == 200


async def test_a_lax_model_checks_only_tool_call_messages() -> None:
    async with DeepSeekStub(lax_reasoning_models=REPORTED_LAX) as stub:
        history = await answered_turn(stub, "Hello!")
        history[1].pop("reasoning_content")
        assert (await post(stub, body(messages=history, tools=TOOLS))).status == 200
        reply = await post(stub, body(model="deepseek-v4-pro", messages=history, tools=TOOLS))
        assert (reply.status, reply.json_body()) == (400, error(PASSBACK_MESSAGE))


# user_id


async def test_a_valid_user_id_is_accepted_and_recorded(stub: DeepSeekStub) -> None:
    longest = "a-Z_9" * 102 + "xy"  # 512 bytes
    for user_id in ("end_user-42", longest):
        assert (await post(stub, body(user_id=user_id))).status == 200
    assert [r.user_id for r in stub.requests] == ["end_user-42", longest]


@pytest.mark.parametrize("user_id", ["", "has space", "naïve", "a" * 513, 42])
async def test_an_invalid_user_id_is_refused(stub: DeepSeekStub, user_id: object) -> None:
    reply = await post(stub, body(user_id=user_id))
    message = "Invalid user_id: a string of [a-zA-Z0-9_-]+, at most 512 bytes"
    assert (reply.status, reply.json_body()) == (400, error(message))


# Concurrency


async def test_past_the_concurrency_limit_a_request_gets_429() -> None:
    async with DeepSeekStub(concurrency_limits={"deepseek-flash": 2}, concurrency_retry_after="3") as stub:
        hold = stub.hold_replies()
        held = [asyncio.create_task(post(stub, body(user_id=f"user{i}"))) for i in range(2)]
        held.append(asyncio.create_task(post(stub, body(model="deepseek-v4-pro"))))  # no limit given for it
        async with asyncio.timeout(5):
            await stub.wait_for_requests(3)
        # All user_ids count together; deepseek-v4-flash is served by (and counted as) deepseek-flash.
        for model in ("deepseek-flash", "deepseek-v4-flash"):
            async with asyncio.timeout(5):  # a request let in would wait for the hold
                refused = await post(stub, body(model=model, user_id="user9"))
            assert (refused.status, refused.headers["Retry-After"], refused.json_body()) == (
                429,
                "3",
                error("Rate Limit Reached", "rate_limit_error"),
            )
        await hold.release()
        assert [r.status for r in await asyncio.gather(*held)] == [200, 200, 200]
        assert (await post(stub, body())).status == 200


async def test_deepseek_v4_pro_takes_500_requests_at_once_by_default(stub: DeepSeekStub) -> None:
    hold = stub.hold_replies()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def status(payload: dict[str, Any]) -> int:
            async with session.post(stub.base_url + "/chat/completions", json=payload, headers=AUTH) as r:
                return r.status

        held = [asyncio.create_task(status(body(model="deepseek-v4-pro"))) for _ in range(500)]
        async with asyncio.timeout(30):
            await stub.wait_for_requests(500)
        async with asyncio.timeout(5):
            assert await status(body(model="deepseek-v4-pro")) == 429
        await hold.release()
        assert set(await asyncio.gather(*held)) == {200}


# JSON Output


async def test_json_schema_response_format_is_refused(stub: DeepSeekStub) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    reply = await post(stub, body(response_format=fmt))
    assert (reply.status, reply.json_body()) == (400, error("This response_format type is unavailable now"))


async def test_json_object_needs_the_word_json_in_the_prompt(stub: DeepSeekStub) -> None:
    hi = [{"role": "user", "content": "hi"}]
    reply = await post(stub, body(messages=hi, response_format={"type": "json_object"}))
    message = "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'."
    assert (reply.status, reply.json_body()) == (400, error(message))
    assert (await post(stub, body(response_format={"type": "json_object"}))).status == 200


@pytest.mark.parametrize(
    ("content", "sent"),
    [
        ('{"answer": 5}', '{"answer": 5}'),
        ('Sure: {"answer": 5} ok', '      {"answer": 5}   '),
        ("I cannot do that.", " " * 17),
        ('{"answer": ', " " * 11),
    ],
)
async def test_json_output_replaces_what_is_not_json_with_spaces(stub: DeepSeekStub, content: str, sent: str) -> None:
    stub.enqueue(StubReply(content=content), StubReply(content=content, chunk_chars=3))
    answer = (await post(stub, body(response_format={"type": "json_object"}))).json_body()["choices"][0]
    assert (answer["message"]["content"], answer["finish_reason"]) == (sent, "stop")
    streamed = await post(stub, body(response_format={"type": "json_object"}, stream=True))
    assert "".join(d.get("content") or "" for d in streamed.deltas()) == sent
    # Without JSON Output the same answer is sent as it is.
    stub.enqueue(StubReply(content=content))
    assert message_of(await post(stub, body()))["content"] == content


async def test_json_blanking_can_be_turned_off() -> None:
    async with DeepSeekStub(json_blanking=False) as stub:
        stub.enqueue(StubReply(content="I cannot do that."))
        reply = await post(stub, body(response_format={"type": "json_object"}))
        assert message_of(reply)["content"] == "I cannot do that."


# max_tokens


async def test_max_tokens_cuts_the_answer_with_finish_reason_length(stub: DeepSeekStub) -> None:
    stub.enqueue(StubReply(content="one two three four five six"))
    answer = (await post(stub, body(thinking={"type": "disabled"}, max_tokens=3))).completion()
    assert answer["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "one two three"},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert answer["usage"] == usage(prompt=8, completion=3)


async def test_the_reasoning_counts_toward_max_tokens(stub: DeepSeekStub) -> None:
    # The reasoning "Thinking (high effort) about: Reply in json please" is 11 tokens.
    stub.enqueue(StubReply(content="one two three four"), StubReply(content="one two three four"))
    answer = (await post(stub, body(max_tokens=13))).completion()
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": "one two",
        "reasoning_content": "Thinking (high effort) about: Reply in json please",
    }
    assert (answer["choices"][0]["finish_reason"], answer["usage"]) == ("length", usage(8, 13, reasoning=11))
    answer = (await post(stub, body(max_tokens=4))).completion()
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Thinking (high effort",
    }
    assert answer["usage"] == usage(8, 4, reasoning=4)


async def test_a_tool_call_that_does_not_fit_is_dropped(stub: DeepSeekStub) -> None:
    stub.enqueue(StubReply(content="Let me add.", tool_calls=[CALL]))
    answer = (await post(stub, body(thinking={"type": "disabled"}, tools=TOOLS, max_tokens=6))).completion()
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "Let me add."}
    assert (answer["choices"][0]["finish_reason"], answer["usage"]) == ("length", usage(8, 4))


async def test_a_streamed_answer_is_cut_at_max_tokens_too(stub: DeepSeekStub) -> None:
    stub.enqueue(StubReply(content="one two three four", chunk_chars=5))
    reply = await post(stub, body(thinking={"type": "disabled"}, max_tokens=2, stream=True))
    assert reply.deltas() == [
        {"role": "assistant", "content": ""},
        {"content": "one t"},
        {"content": "wo"},
        {"content": ""},
    ]
    assert reply.chunks()[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("max_tokens", [0, -1, "5", True, 2.5])
async def test_an_invalid_max_tokens_is_refused(stub: DeepSeekStub, max_tokens: object) -> None:
    reply = await post(stub, body(max_tokens=max_tokens))
    assert (reply.status, reply.json_body()) == (400, error("Invalid max_tokens: expected a positive integer"))


# Scripted replies, usage, streaming, faults


async def test_non_streaming_answer_with_tool_calls_and_explicit_usage(stub: DeepSeekStub) -> None:
    stub.cache_hit_tokens = 2
    explicit = StubUsage(prompt_tokens=10, completion_tokens=4, cache_hit_tokens=6, reasoning_tokens=3)
    stub.enqueue(StubReply(content="", reasoning_content="Use the tool.", tool_calls=[CALL], usage=explicit))
    reply = await post(stub, body(tools=TOOLS), path="/v1/chat/completions")
    answer = reply.completion()
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Use the tool.",
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
    assert answer["usage"] == usage(prompt=10, completion=4, hit=6, reasoning=3)
    recorded = stub.requests[-1]
    assert (recorded.path, recorded.body, recorded.headers["Authorization"]) == (
        "/v1/chat/completions",
        body(tools=TOOLS),
        "Bearer sk-stub-key",
    )


async def test_stream_has_usage_on_last_chunk_only_when_asked(stub: DeepSeekStub) -> None:
    stub.cache_hit_tokens = 3
    stub.enqueue(StubReply(content="abcdefghij", chunk_chars=4), StubReply(content="abcdefghij", chunk_chars=4))
    reply = await post(stub, body(stream=True, thinking={"type": "disabled"}))
    assert [d.get("content") for d in reply.deltas()] == ["", "abcd", "efgh", "ij", ""]
    assert [c["choices"][0]["finish_reason"] for c in reply.chunks()] == [None, None, None, None, "stop"]
    assert all("usage" not in c for c in reply.chunks())

    reply = await post(stub, body(stream=True, thinking={"type": "disabled"}, stream_options={"include_usage": True}))
    chunks = reply.chunks()
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[-1]["usage"] == usage(prompt=8, completion=1, hit=3)


async def test_injected_status_fault_carries_retry_after_and_is_consumed_once(stub: DeepSeekStub) -> None:
    stub.enqueue(StubFault(kind="status", status=429, retry_after="7", message="Rate limit reached"))
    reply = await post(stub, body())
    assert (reply.status, reply.headers["Retry-After"], reply.json_body()) == (
        429,
        "7",
        error("Rate limit reached", "rate_limit_error"),
    )
    assert (await post(stub, body())).status == 200
    assert len(stub.requests) == 2


async def test_a_disconnect_fault_streams_the_requested_model_before_dropping(stub: DeepSeekStub) -> None:
    stub.enqueue(StubFault(kind="disconnect", after_chunks=2, content="partial answer", chunk_chars=7))
    url = stub.base_url + "/chat/completions"
    received = b""
    async with aiohttp.ClientSession() as session, session.post(url, json=body(stream=True), headers=AUTH) as r:
        with pytest.raises(aiohttp.ClientPayloadError):
            async for piece in r.content.iter_any():
                received += piece
    events = [json.loads(e.removeprefix("data: ")) for e in received.decode().split("\n\n") if e]
    assert [(e["model"], e["choices"][0]["delta"]) for e in events] == [
        ("deepseek-flash", {"role": "assistant", "content": ""}),
        ("deepseek-flash", {"content": "partial"}),
    ]
