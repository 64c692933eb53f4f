"""DeepSeek's context caching, modelled for tests and benchmarks: a stub that bills prefix-cache hits from bytes.

As DeepSeek documents its disk cache (api-docs, "Context Caching"): a request hits the cache for the longest
prefix it shares, from the first token, with an earlier request; the cache stores prefixes in units of 64
tokens, so only whole units hit and a prefix under 64 tokens never does. Modelled here without a tokenizer:
the request is serialised deterministically (each message's role, content, tool calls and tool call id, in
order, as JSON; the tool definitions last, so they count as prompt but do not break the messages' prefix),
and one token is 4 bytes of that UTF-8 text (English runs ~4 characters a token; a Chinese character is 3
bytes, ~0.75 token, close to DeepSeek's stated ~0.6). A unit is therefore 256 bytes; a request hits
`64 * k` tokens when its first `256 * k` bytes equal those of any earlier request. Nothing is ever evicted
(DeepSeek keeps entries for hours; a benchmark conversation lasts minutes). Completion tokens are the
answer's bytes / 4 as well.

`PrefixCacheStub` is `DeepSeekStub` with this accounting for every reply without explicit usage; everything
else (validation, streaming, faults, scripting) is the stub's own.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, Responder, StubReply, echo_responder

BYTES_PER_TOKEN = 4
UNIT_TOKENS = 64
UNIT_BYTES = UNIT_TOKENS * BYTES_PER_TOKEN
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id")


class CacheAccount(BaseModel):
    prompt_tokens: int
    hit_tokens: int
    prompt_bytes: bytes


def serialise(body: dict[str, Any]) -> bytes:
    """The request's prompt as the cache sees it: messages in order, then the tool definitions."""
    messages = body.get("messages") or []
    parts = [
        json.dumps({key: m.get(key) for key in _MESSAGE_KEYS if m.get(key) is not None}, ensure_ascii=False)
        for m in messages
        if isinstance(m, dict)
    ]
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], ensure_ascii=False, sort_keys=True))
    return "\n".join(parts).encode()


class PrefixCache:
    def __init__(self) -> None:
        self._units: set[bytes] = set()

    def account(self, prompt: bytes) -> CacheAccount:
        """The prompt's tokens and cache hits; then its whole units are cached for later requests."""
        digest = hashlib.sha256()
        hit_units = 0
        matching = True
        for unit in range(len(prompt) // UNIT_BYTES):
            digest.update(prompt[unit * UNIT_BYTES : (unit + 1) * UNIT_BYTES])
            key = digest.copy().digest()
            if matching and key in self._units:
                hit_units += 1
            else:
                matching = False
                self._units.add(key)
        tokens = math.ceil(len(prompt) / BYTES_PER_TOKEN)
        return CacheAccount(prompt_tokens=tokens, hit_tokens=hit_units * UNIT_TOKENS, prompt_bytes=prompt)


class PrefixCacheStub(DeepSeekStub):
    """`DeepSeekStub` whose usage bills prefix-cache hits as DeepSeek does; `accounts[i]` is request i's."""

    def __init__(self, *, api_key: str | None = "sk-stub-key", responder: Responder = echo_responder) -> None:
        super().__init__(api_key=api_key, responder=responder)
        self.cache = PrefixCache()
        self.accounts: list[CacheAccount] = []

    def _usage(self, reply: StubReply, recorded: RecordedRequest) -> dict[str, Any]:
        if reply.usage is not None:
            return super()._usage(reply, recorded)
        body = recorded.body if isinstance(recorded.body, dict) else {}
        account = self.cache.account(serialise(body))
        self.accounts.append(account)
        answer = reply.content + "".join(c.name + c.arguments for c in reply.tool_calls)
        completion = max(1, math.ceil(len(answer.encode()) / BYTES_PER_TOKEN))
        prompt, hit = account.prompt_tokens, account.hit_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": hit},
            "prompt_cache_hit_tokens": hit,
            "prompt_cache_miss_tokens": prompt - hit,
        }
