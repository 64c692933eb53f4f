"""DeepSeek's context caching, modelled for tests and benchmarks: a stub that bills cache hits from bytes.

The rules, from https://api-docs.deepseek.com/guides/kv_cache (zh-cn: https://api-docs.deepseek.com/zh-cn/guides/kv_cache):
the cache stores "cache prefix units", and a request hits a unit only if it matches it in full (the unit is a prefix
of the request). Units are persisted
1. at the end of each request's input and at the end of its output;
2. at common prefixes the system detects across requests (A+B, then A+C: no hit for A+C, but A is persisted, so a
   later A+D hits A);
3. at fixed token intervals inside long inputs and outputs.
Hits are counted in whole 64-token blocks (the cache's storage unit: a shorter rest is not cached), and tool
definitions are rendered inside the system turn and cached with it, so a request with another tool list (or none)
shares only what comes before them.
Usage reports `prompt_cache_hit_tokens`, `prompt_cache_miss_tokens` (hit + miss = prompt tokens) and
`prompt_tokens_details.cached_tokens`. The cache is isolated per end user: per API key and `user_id`
(https://api-docs.deepseek.com/quick_start/rate_limit); requests without a user_id share one namespace.

How it is modelled, and what is assumed:
- No tokenizer: the request is serialised deterministically to bytes and one token is 4 bytes of that UTF-8 text
  (an approximation: English runs ~4 characters a token; a Chinese character is 3 bytes, ~0.75 token). A prefix of
  n bytes is ceil(n / 4) tokens.
- The serialisation: the first system message, then the tool definitions if any (the system turn), then the other
  messages in order (`tools_in_prefix=False`, the worst case: the tools after the messages, outside any prefix a
  later request repeats), one JSON line each with
  role, content, tool_calls (id, type, function name and arguments only, so a client's extra keys do not matter),
  tool_call_id and, in thinking mode, `reasoning_content` only for assistant messages of a user-to-user span with
  tool calls: the API ignores any other reasoning (https://api-docs.deepseek.com/guides/thinking_mode).
- The output unit is the prompt followed by the assistant message as a later request would serialise it (so its
  reasoning counts only where the model reads it back; JSON-blanked content as sent).
- A detected common prefix is the longest one this request shares with an earlier request of its namespace (its
  input, or its input and output), rounded down to a whole token, persisted once this request is accounted.
- The fixed interval is not documented: `interval_tokens`, 1024 by default, is an assumption (the benchmarks sweep
  it from 64 to 4,096). `block_tokens` (64) is the block hits are counted in; unit tests of the rules set it to 1.
- A namespace is also per served model (a KV cache belongs to one model; `deepseek-v4-flash` is served by, and
  shares the cache of, `deepseek-flash`). Nothing is ever evicted (DeepSeek keeps entries for hours; a benchmark
  lasts minutes). A request's hit is the longest unit that is a full prefix of its prompt; units it persists itself
  count only for later requests.

`PrefixCacheStub` is `DeepSeekStub` with this accounting (and 4-byte tokens) for every reply without explicit
usage; everything else (validation, streaming, faults, scripting) is the stub's own. `PrefixCache` works alone.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from tests.stubs.deepseek_stub import (
    DEFAULT_CONCURRENCY_LIMITS,
    DeepSeekStub,
    EndUser,
    RecordedRequest,
    Responder,
    StubAnswer,
    StubReply,
    UsagePayload,
    answer_message,
    content_text,
    echo_responder,
    served_model,
    thinking_enabled,
)

BYTES_PER_TOKEN = 4
DEFAULT_INTERVAL_TOKENS = 1024
BLOCK_TOKENS = 64
# The names tests/runs/gateway/test_runs_prefix_cache.py imports (from the old 64-token-unit model). With fixed
# intervals a prefix shared with an earlier request still hits at least its whole intervals, which that test checks.
UNIT_TOKENS = DEFAULT_INTERVAL_TOKENS
UNIT_BYTES = UNIT_TOKENS * BYTES_PER_TOKEN
# Bytes compared at a time when looking for where two prompts part (then bisected within the chunk).
_SCAN_BYTES = 4096


def tokens_of(size: int) -> int:
    return math.ceil(size / BYTES_PER_TOKEN)


class CacheNamespace(BaseModel):
    model_config = ConfigDict(frozen=True)

    end_user: EndUser
    model: str


class CacheAccount(BaseModel):
    prompt_tokens: int
    hit_tokens: int
    prompt_bytes: bytes


class RenderedFunction(BaseModel):
    name: Any = None
    arguments: Any = None


class RenderedToolCall(BaseModel):
    id: Any = None
    type: str = "function"
    function: RenderedFunction


class RenderedMessage(BaseModel):
    """One message as the cache sees it (a JSON line of the serialised prompt). The values are the client's, of
    whatever JSON type it sent: rendered as they came."""

    role: Any = None
    content: str
    tool_calls: list[RenderedToolCall] | None = None
    tool_call_id: Any = None
    reasoning_content: Any = None

    @classmethod
    def of(cls, message: Mapping[str, Any], keep_reasoning: bool) -> RenderedMessage:
        calls = message.get("tool_calls")
        rendered_calls = [
            RenderedToolCall(id=c.get("id"), function=RenderedFunction(**_function_fields(c.get("function"))))
            for c in (calls if isinstance(calls, list) else [])
            if isinstance(c, dict)
        ]
        return cls(
            role=message.get("role"),
            content=content_text(message.get("content")),
            tool_calls=rendered_calls or None,
            tool_call_id=message.get("tool_call_id"),
            reasoning_content=message.get("reasoning_content") if keep_reasoning else None,
        )

    def line(self) -> str:
        return self.model_dump_json(exclude_none=True)


def _function_fields(function: Any) -> dict[str, Any]:
    return {"name": function.get("name"), "arguments": function.get("arguments")} if isinstance(function, dict) else {}


def _reasoning_read(messages: Sequence[Mapping[str, Any]], thinking: bool) -> list[bool]:
    """Per message: whether the model reads its reasoning_content (an assistant message, in thinking mode, of a
    user-to-user span in which the model called tools)."""
    span_of: list[int] = []
    span_has_tools = [False]
    for message in messages:
        if message.get("role") == "user":
            span_has_tools.append(False)
        span_of.append(len(span_has_tools) - 1)
        if message.get("role") == "assistant" and message.get("tool_calls"):
            span_has_tools[-1] = True
    return [
        thinking and message.get("role") == "assistant" and span_has_tools[span]
        for message, span in zip(messages, span_of, strict=True)
    ]


def serialise(body: Mapping[str, Any], *, tools_in_prefix: bool = True) -> bytes:
    """The request's prompt as the cache sees it: the system turn (first system message, tool definitions), then the
    other messages; with `tools_in_prefix=False` the tool definitions come last."""
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    read = _reasoning_read(messages, thinking_enabled(body))
    lines = [RenderedMessage.of(m, keep).line() for m, keep in zip(messages, read, strict=True)]
    system = next((i for i, m in enumerate(messages) if m.get("role") == "system"), None)
    head = [lines.pop(system)] if system is not None else []
    tools = [json.dumps(body["tools"], ensure_ascii=False, sort_keys=True)] if body.get("tools") else []
    if not tools_in_prefix:
        return "\n".join([*head, *lines, *tools]).encode()
    return "\n".join([*head, *tools, *lines]).encode()


def serialise_output(body: Mapping[str, Any], prompt: bytes, answer: Mapping[str, Any]) -> bytes:
    """The prompt followed by the answer's assistant message as a later request would serialise it."""
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    keep = _reasoning_read([*messages, answer], thinking_enabled(body))[-1]
    return prompt + b"\n" + RenderedMessage.of(answer, keep).line().encode()


def common_prefix_length(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share: chunk by chunk to the first difference, then bisected there."""
    limit = min(len(a), len(b))
    start = 0
    while start < limit and a[start : start + _SCAN_BYTES] == b[start : start + _SCAN_BYTES]:
        start += _SCAN_BYTES
    if start >= limit:
        return limit
    low, high = start, min(start + _SCAN_BYTES, limit)  # a[:low] == b[:low]; they differ before `high` + 1
    while low < high:
        middle = (low + high + 1) // 2
        if a[start:middle] == b[start:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class _Namespace:
    """One namespace's units (prefix digests by length) and the earlier sequences (inputs, input + output)."""

    def __init__(self) -> None:
        self.units: defaultdict[int, set[bytes]] = defaultdict(set)
        self.lengths: list[int] = []
        # Sorted; a sequence that is a prefix of another is dropped (the longer one shares at least as much). The
        # bytes are kept to find common prefixes: 2,000 requests of ~130 KB that all end apart keep ~270 MB.
        self.sequences: list[bytes] = []

    def longest_shared(self, data: bytes) -> int:
        """The longest prefix `data` shares with an earlier sequence: in sorted order, one of its neighbours."""
        at = bisect.bisect_left(self.sequences, data)
        neighbours = self.sequences[max(0, at - 1) : at + 1]
        return max((common_prefix_length(data, other) for other in neighbours), default=0)

    def longest_unit(self, data: bytes, bound: int) -> int:
        """The longest unit that is a prefix of `data`; none is longer than what `data` shares with a sequence."""
        view = memoryview(data)
        digest = hashlib.sha256()
        hashed = best = 0
        for length in self.lengths[: bisect.bisect_right(self.lengths, bound)]:
            digest.update(view[hashed:length])
            hashed = length
            if digest.copy().digest() in self.units[length]:
                best = length
        return best

    def persist(self, data: bytes, lengths: set[int]) -> None:
        """Units at these lengths of `data`, and `data` as a sequence later requests may share."""
        view = memoryview(data)
        digest = hashlib.sha256()
        hashed = 0
        for length in sorted(n for n in lengths if 0 < n <= len(data)):
            digest.update(view[hashed:length])
            hashed = length
            if length not in self.units:
                bisect.insort(self.lengths, length)
            self.units[length].add(digest.copy().digest())
        at = bisect.bisect_left(self.sequences, data)
        if at < len(self.sequences) and self.sequences[at].startswith(data):
            return
        while at > 0 and data.startswith(self.sequences[at - 1]):
            del self.sequences[at - 1]
            at -= 1
        self.sequences.insert(at, data)


class PrefixCache:
    """The cache prefix units of every namespace. Per request: `account` its prompt, then `persist_output`."""

    def __init__(self, interval_tokens: int = DEFAULT_INTERVAL_TOKENS, block_tokens: int = BLOCK_TOKENS) -> None:
        self.interval_bytes = interval_tokens * BYTES_PER_TOKEN
        self.block_tokens = block_tokens
        self._namespaces: defaultdict[CacheNamespace, _Namespace] = defaultdict(_Namespace)

    def _intervals(self, size: int) -> set[int]:
        return set(range(self.interval_bytes, size + 1, self.interval_bytes))

    def account(self, namespace: CacheNamespace, prompt: bytes) -> CacheAccount:
        """The prompt's tokens and cache hit; then its input unit, its intervals and the common prefix it shares
        with an earlier request are persisted for later requests."""
        space = self._namespaces[namespace]
        shared = space.longest_shared(prompt)
        hit = space.longest_unit(prompt, shared)
        common = shared // BYTES_PER_TOKEN * BYTES_PER_TOKEN
        space.persist(prompt, {len(prompt), common, *self._intervals(len(prompt))})
        blocks = tokens_of(hit) // self.block_tokens
        return CacheAccount(
            prompt_tokens=tokens_of(len(prompt)), hit_tokens=blocks * self.block_tokens, prompt_bytes=prompt
        )

    def persist_output(self, namespace: CacheNamespace, sequence: bytes) -> None:
        """The output unit (the prompt followed by the answer) and its intervals."""
        self._namespaces[namespace].persist(sequence, {len(sequence), *self._intervals(len(sequence))})


class PrefixCacheStub(DeepSeekStub):
    """`DeepSeekStub` whose usage bills cache hits as DeepSeek does; `accounts` holds one `CacheAccount` per
    answered request without explicit usage, in order."""

    def __init__(
        self,
        *,
        interval_tokens: int = DEFAULT_INTERVAL_TOKENS,
        block_tokens: int = BLOCK_TOKENS,
        tools_in_prefix: bool = True,
        api_key: str | None = "sk-stub-key",
        responder: Responder = echo_responder,
        strict_turns: bool = False,
        strict_reasoning: bool = True,
        json_blanking: bool = True,
        concurrency_limits: Mapping[str, int] = DEFAULT_CONCURRENCY_LIMITS,
        concurrency_retry_after: str | None = None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            responder=responder,
            strict_turns=strict_turns,
            strict_reasoning=strict_reasoning,
            json_blanking=json_blanking,
            concurrency_limits=concurrency_limits,
            concurrency_retry_after=concurrency_retry_after,
        )
        self.cache = PrefixCache(interval_tokens, block_tokens)
        self.tools_in_prefix = tools_in_prefix
        self.accounts: list[CacheAccount] = []

    # Tokens are 4 bytes here too, so max_tokens and completion tokens agree with the prompt's billing.
    def _count(self, text: str) -> int:
        return tokens_of(len(text.encode()))

    def _cut(self, text: str, tokens: int) -> str:
        return text.encode()[: tokens * BYTES_PER_TOKEN].decode(errors="ignore")

    def _usage(self, reply: StubReply, answer: StubAnswer, recorded: RecordedRequest) -> UsagePayload:
        if reply.usage is not None:
            return super()._usage(reply, answer, recorded)
        body = recorded.fields
        namespace = CacheNamespace(end_user=recorded.end_user, model=served_model(body["model"]))
        account = self.cache.account(namespace, serialise(body, tools_in_prefix=self.tools_in_prefix))
        self.accounts.append(account)
        output = serialise_output(body, account.prompt_bytes, answer_message(answer).wire())
        self.cache.persist_output(namespace, output)
        return UsagePayload.of(
            account.prompt_tokens, answer.completion_tokens, account.hit_tokens, answer.reasoning_tokens
        )
