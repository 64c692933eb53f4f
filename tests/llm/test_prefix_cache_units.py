"""The prefix-cache stub bills cache hits by DeepSeek's cache prefix units (guides/kv_cache), checked over HTTP:
the docs' own examples, isolation per user_id, API key and model, fixed intervals in inputs and outputs, tool
loops in thinking mode; plus the serialisation and `PrefixCache` alone (against a naive reference model)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import BaseModel
from tests.stubs.deepseek_stub import EndUser, StubReply, StubToolCall
from tests.stubs.prefix_cache import (
    CacheNamespace,
    PrefixCache,
    PrefixCacheStub,
    common_prefix_length,
    serialise,
    tokens_of,
)

AUTH = {"Authorization": "Bearer sk-stub-key"}
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
CALL = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "2+3"}')
NO_THINKING = {"type": "disabled"}


class Billed(BaseModel):
    """What a request was billed, and the message it got."""

    prompt_tokens: int
    hit_tokens: int
    message: dict[str, Any]


@pytest.fixture
async def cache_stub() -> AsyncIterator[PrefixCacheStub]:
    # The unit rules alone, to the token: hits rounded to 64-token blocks have their own test.
    async with PrefixCacheStub(block_tokens=1) as stub:
        yield stub


def request(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "deepseek-flash", "messages": list(messages), **extra}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def send(stub: PrefixCacheStub, payload: dict[str, Any], key: str = "sk-stub-key") -> Billed:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(stub.base_url + "/chat/completions", json=payload, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        answer = await r.json()
    usage = answer["usage"]
    assert usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"] == usage["prompt_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": usage["prompt_cache_hit_tokens"]}
    return Billed(
        prompt_tokens=usage["prompt_tokens"],
        hit_tokens=usage["prompt_cache_hit_tokens"],
        message=answer["choices"][0]["message"],
    )


def shared_length(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share (plain bisection, to check the stub's own search)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if a[:middle] == b[:middle] else (low, middle - 1)
    return low


def prompt_tokens(payload: dict[str, Any]) -> int:
    return tokens_of(len(serialise(payload)))


@pytest.mark.parametrize("passed_back", ["none", "placeholder", "as received"])
async def test_docs_example_multi_turn_hits_the_first_requests_output(
    cache_stub: PrefixCacheStub, passed_back: str
) -> None:
    system = {"role": "system", "content": "你是一位乐于助人的助手"}
    first = request(system, user("中国的首都是哪里？"))
    billed = await send(cache_stub, first)
    assert (billed.prompt_tokens, billed.hit_tokens) == (prompt_tokens(first), 0)

    # Thinking mode: the reasoning of a turn without tool calls is not read, so however it comes back it does not
    # change what the second request shares with the first one's output.
    answer = dict(billed.message)
    if passed_back == "none":
        answer.pop("reasoning_content")
    elif passed_back == "placeholder":
        answer["reasoning_content"] = " "
    second = request(system, user("中国的首都是哪里？"), answer, user("美国的首都是哪里？"))
    billed = await send(cache_stub, second)
    output = request(system, user("中国的首都是哪里？"), answer)
    assert (billed.prompt_tokens, billed.hit_tokens) == (prompt_tokens(second), prompt_tokens(output))
    assert billed.hit_tokens > prompt_tokens(first)


async def test_docs_example_common_prefix_is_persisted_for_the_third_request(cache_stub: PrefixCacheStub) -> None:
    system = {"role": "system", "content": "你是一位资深的财报分析师..."}
    asks = ["请总结一下这份财报的关键信息。", "请分析一下这份财报的盈利情况。", "请评估一下这份财报的风险。"]
    first, second, third = (request(system, user(f"<财报内容>\n\n{ask}")) for ask in asks)
    assert (await send(cache_stub, first)).hit_tokens == 0
    # A+C does not match A+B in full: no hit; but their common prefix A is persisted...
    assert (await send(cache_stub, second)).hit_tokens == 0
    # ...which A+D matches in full (rounded down to a whole 4-byte token).
    shared = shared_length(serialise(first), serialise(second))
    assert (await send(cache_stub, third)).hit_tokens == shared // 4


async def test_the_cache_is_isolated_per_user_id(cache_stub: PrefixCacheStub) -> None:
    question = request(user("What is the capital of France?"), thinking=NO_THINKING)
    full = prompt_tokens(question)
    hits = [
        (await send(cache_stub, {**question, "user_id": user_id} if user_id else question)).hit_tokens
        for user_id in ("alice", "alice", "bob", None, None, "alice")
    ]
    # Requests without a user_id share one namespace, apart from every user_id's.
    assert hits == [0, full, 0, 0, full, full]


async def test_the_cache_is_isolated_per_api_key_and_served_model() -> None:
    async with PrefixCacheStub(api_key=None, block_tokens=1) as stub:
        question = request(user("What is the capital of France?"))
        full = prompt_tokens(question)
        assert (await send(stub, question, key="sk-one")).hit_tokens == 0
        assert (await send(stub, question, key="sk-two")).hit_tokens == 0
        assert (await send(stub, {**question, "model": "deepseek-v4-pro"}, key="sk-one")).hit_tokens == 0
        # deepseek-v4-flash is served by deepseek-flash: same model, same cache.
        assert (await send(stub, {**question, "model": "deepseek-v4-flash"}, key="sk-one")).hit_tokens == full


async def test_fixed_intervals_inside_a_long_input() -> None:
    async with PrefixCacheStub(interval_tokens=4, block_tokens=1) as stub:  # 16 bytes
        first = request(user("x" * 200), thinking=NO_THINKING)
        # Its own interval units are not there for the request that persists them.
        assert (await send(stub, first)).hit_tokens == 0
        second = request(user("x" * 150 + "y" * 50), thinking=NO_THINKING)
        shared = common_prefix_length(serialise(first), serialise(second))
        assert shared > 150
        assert (await send(stub, second)).hit_tokens == shared // 16 * 4


async def test_fixed_intervals_inside_a_long_output() -> None:
    async with PrefixCacheStub(interval_tokens=4, block_tokens=1) as stub:
        stub.enqueue(StubReply(content="a" * 300))
        first = request(user("q"), thinking=NO_THINKING)
        assert (await send(stub, first)).hit_tokens == 0
        # The next request carries the answer edited after 200 characters: it matches the first request's input
        # unit, not its output unit, and the output's intervals up to the edit, longer than that input.
        edited = {"role": "assistant", "content": "a" * 200 + "b" * 100}
        second = request(user("q"), edited, user("next"), thinking=NO_THINKING)
        output = serialise(request(user("q"), {"role": "assistant", "content": "a" * 300}, thinking=NO_THINKING))
        shared = common_prefix_length(output, serialise(second))
        assert shared > len(serialise(first)) + 200
        assert (await send(stub, second)).hit_tokens == shared // 16 * 4


async def test_a_tool_loop_hits_the_output_only_with_the_reasoning_passed_back() -> None:
    async with PrefixCacheStub(strict_reasoning=False, block_tokens=1) as stub:
        system = {"role": "system", "content": "You add numbers."}
        stub.enqueue(StubReply(tool_calls=[CALL]), StubReply(tool_calls=[CALL]))
        first = request(system, user("What is 2+3?"), tools=TOOLS)
        called = (await send(stub, first)).message
        assert called["reasoning_content"] == "Thinking (high effort) about: What is 2+3?"
        result = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
        loop = request(system, user("What is 2+3?"), called, result, tools=TOOLS)
        # The reasoning of a tool call is read by the model: it is part of the cached output.
        output = request(system, user("What is 2+3?"), called, tools=TOOLS)
        assert (await send(stub, loop)).hit_tokens == prompt_tokens(output)
        # With LiteLLM's placeholder instead, the request parts from that output at the reasoning: only the
        # earlier input unit (the first request's prompt) hits.
        blinded = request(system, user("What is 2+3?"), {**called, "reasoning_content": " "}, result, tools=TOOLS)
        assert (await send(stub, blinded)).hit_tokens == prompt_tokens(first)


async def test_every_answered_request_is_accounted(cache_stub: PrefixCacheStub) -> None:
    payloads = [request(user("one")), request(user("one two"), user_id="u1"), request(user("one"))]
    billed = [await send(cache_stub, p) for p in payloads]
    assert [(a.prompt_tokens, a.hit_tokens) for a in cache_stub.accounts] == [
        (b.prompt_tokens, b.hit_tokens) for b in billed
    ]
    assert [a.prompt_bytes for a in cache_stub.accounts] == [serialise(p) for p in payloads]


async def test_max_tokens_counts_four_byte_tokens(cache_stub: PrefixCacheStub) -> None:
    cache_stub.enqueue(StubReply(content="abcdefghij"))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            cache_stub.base_url + "/chat/completions",
            json=request(user("hi"), thinking=NO_THINKING, max_tokens=2),
            headers=AUTH,
        ) as r,
    ):
        answer = await r.json()
    assert (answer["choices"][0]["message"]["content"], answer["choices"][0]["finish_reason"]) == ("abcdefgh", "length")
    assert answer["usage"]["completion_tokens"] == 2


def test_the_serialisation_puts_system_then_tools_then_messages_and_keeps_read_reasoning_only() -> None:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
    }
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+3?"}]},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": "Use the tool."},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "assistant", "content": "It is 5.", "reasoning_content": "Done."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome.", "reasoning_content": "Polite."},
        {"role": "user", "content": "bye"},
    ]
    lines = [
        '{"role":"system","content":"Be brief."}',
        '[{"function": {"name": "calculator", "parameters": {"type": "object"}}, "type": "function"}]',
        '{"role":"user","content":"What is 2+3?"}',
        '{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":'
        '{"name":"calculator","arguments":"{\\"expression\\": \\"2+3\\"}"}}],"reasoning_content":"Use the tool."}',
        '{"role":"tool","content":"5","tool_call_id":"call_1"}',
        '{"role":"assistant","content":"It is 5.","reasoning_content":"Done."}',
        '{"role":"user","content":"thanks"}',
        '{"role":"assistant","content":"You\'re welcome."}',
        '{"role":"user","content":"bye"}',
    ]
    assert serialise({"messages": messages, "tools": TOOLS}) == "\n".join(lines).encode()
    no_reasoning = [line.replace(',"reasoning_content":"Use the tool."', "") for line in lines]
    no_reasoning = [line.replace(',"reasoning_content":"Done."', "") for line in no_reasoning]
    assert (
        serialise({"messages": messages, "tools": TOOLS, "thinking": NO_THINKING}) == "\n".join(no_reasoning).encode()
    )


async def test_hits_are_counted_in_whole_64_token_blocks() -> None:
    async with PrefixCacheStub() as stub:
        system = {"role": "system", "content": "You answer briefly. " * 40}
        first = request(system, user("What is the capital of France?"), thinking=NO_THINKING)
        billed = await send(stub, first)
        answer = {"role": "assistant", "content": billed.message["content"]}
        second = request(system, user("What is the capital of France?"), answer, user("And of Spain?"))
        output = prompt_tokens(request(system, user("What is the capital of France?"), answer))
        assert output % 64 != 0
        assert (await send(stub, {**second, "thinking": NO_THINKING})).hit_tokens == output // 64 * 64


async def test_tools_are_cached_with_the_system_turn_unless_the_worst_case_puts_them_last() -> None:
    system = {"role": "system", "content": "You add numbers. " * 60}
    turns = [user("What is 2+3?"), {"role": "assistant", "content": "5"}]
    first = request(system, *turns, user("And 4+4?"), tools=TOOLS, thinking=NO_THINKING)
    second = request(system, *turns, user("And 4+4?"), {"role": "assistant", "content": "8"}, user("1+1?"))
    second = {**second, "tools": TOOLS, "thinking": NO_THINKING}
    hits = []
    for in_prefix in (True, False):
        async with PrefixCacheStub(tools_in_prefix=in_prefix, block_tokens=1) as stub:
            stub.enqueue(StubReply(content="8"))
            await send(stub, first)
            hits.append((await send(stub, second)).hit_tokens)
    # In the system turn the tools are part of the first request's output unit, which the second repeats in full.
    output = request(system, *turns, user("And 4+4?"), {"role": "assistant", "content": "8"}, tools=TOOLS)
    assert hits[0] == prompt_tokens({**output, "thinking": NO_THINKING})
    # Last, they end every unit: the second request repeats none of the first one's, only the interval units
    # (none here) and the common prefixes detected earlier (none): it misses everything.
    assert hits[1] == 0


NAMESPACE = CacheNamespace(end_user=EndUser(api_key="k", user_id=None), model="deepseek-flash")


def test_prefix_cache_alone_follows_the_unit_rules() -> None:
    cache = PrefixCache(interval_tokens=1024, block_tokens=1)
    assert cache.account(NAMESPACE, b"A" * 10 + b"B" * 10).hit_tokens == 0
    assert cache.account(NAMESPACE, b"A" * 10 + b"C" * 10).hit_tokens == 0
    # The common prefix, 10 bytes, is persisted as 8 (2 whole tokens).
    assert cache.account(NAMESPACE, b"A" * 10 + b"D" * 10).hit_tokens == 2
    cache.persist_output(NAMESPACE, b"A" * 10 + b"D" * 10 + b"answer")
    assert cache.account(NAMESPACE, b"A" * 10 + b"D" * 10 + b"answer, more").hit_tokens == tokens_of(26)
    other = CacheNamespace(end_user=EndUser(api_key="k", user_id="u"), model="deepseek-flash")
    assert cache.account(other, b"A" * 10 + b"D" * 10 + b"answer, more").hit_tokens == 0


class NaiveCache:
    """The unit rules spelled out, without any of PrefixCache's shortcuts (to check them)."""

    def __init__(self, interval_bytes: int) -> None:
        self.interval_bytes = interval_bytes
        self.units: set[bytes] = set()
        self.sequences: list[bytes] = []

    def persist(self, data: bytes, lengths: list[int]) -> None:
        self.units.update(data[:n] for n in lengths if n > 0)
        self.sequences.append(data)

    def account(self, prompt: bytes) -> int:
        hit = max((len(u) for u in self.units if prompt.startswith(u)), default=0)
        shared = max((shared_length(prompt, s) for s in self.sequences), default=0)
        intervals = list(range(self.interval_bytes, len(prompt) + 1, self.interval_bytes))
        self.persist(prompt, [len(prompt), shared // 4 * 4, *intervals])
        return tokens_of(hit)

    def persist_output(self, sequence: bytes) -> None:
        self.persist(sequence, [len(sequence), *range(self.interval_bytes, len(sequence) + 1, self.interval_bytes)])


def test_prefix_cache_agrees_with_the_naive_rules_on_random_conversations() -> None:
    rng = random.Random(20261201)
    cache, naive = PrefixCache(interval_tokens=8, block_tokens=1), NaiveCache(interval_bytes=32)
    sequences: list[bytes] = [b""]
    for _ in range(400):
        # Branch off an earlier sequence (often the end of one), with a short new tail from a small alphabet.
        base = rng.choice(sequences)
        prompt = base[: rng.choice([len(base), rng.randint(0, len(base))])] + bytes(
            rng.choices(b"ab", k=rng.randint(1, 40))
        )
        assert cache.account(NAMESPACE, prompt).hit_tokens == naive.account(prompt), prompt
        output = prompt + bytes(rng.choices(b"ab", k=rng.randint(0, 40)))
        cache.persist_output(NAMESPACE, output)
        naive.persist_output(output)
        sequences += [prompt, output]
