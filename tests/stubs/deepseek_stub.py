"""A local stand-in for the DeepSeek chat API (OpenAI-compatible) for tests and benchmarks.

It validates requests the way the real API does (bearer key, model name, `response_format` rules), answers
from a scripted queue or a default responder, can inject faults, and records every request it received.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Callable
from itertools import pairwise
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, Field

KNOWN_MODELS = frozenset({"deepseek-chat", "deepseek-reasoner"})
_TOKEN_RE = re.compile(r"[\u3400-\u9fff]|\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


class StubToolCall(BaseModel):
    id: str
    name: str
    arguments: str = "{}"


class StubUsage(BaseModel):
    """Explicit usage for a reply; otherwise it is counted from the request and the answer."""

    prompt_tokens: int
    completion_tokens: int
    cache_hit_tokens: int = 0


class StubReply(BaseModel):
    content: str = ""
    reasoning_content: str = Field(default="", description="deepseek-reasoner's reasoning, sent before the content.")
    tool_calls: list[StubToolCall] = Field(default_factory=list)
    usage: StubUsage | None = None
    delay_seconds: float = Field(default=0.0, description="Wait before the first byte (slow upstream).")
    chunk_chars: int = Field(default=4, ge=1, description="Characters of content per streamed chunk.")
    chunk_delay_seconds: float = Field(default=0.0, description="Pause between streamed chunks.")
    stall_after_chunks: int | None = Field(default=None, description="Go silent after this many chunks...")
    stall_seconds: float = Field(default=0.0, description="...for this long, then carry on.")

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


class StubFault(BaseModel):
    kind: Literal["status", "disconnect", "invalid_json"]
    status: int = 500
    message: str = "Service is too busy, please retry later."
    retry_after: str | None = None
    after_chunks: int = Field(default=2, description="Chunks streamed before a `disconnect` drops the line.")
    content: str | None = Field(default=None, description="The reply a `disconnect` streams before it drops.")
    chunk_chars: int = Field(default=4, ge=1, description="Characters of `content` per streamed chunk.")


class RecordedRequest(BaseModel):
    path: str
    headers: dict[str, str]
    body: Any = Field(description="Parsed JSON body, or None when it was not valid JSON.")

    @property
    def messages(self) -> list[dict[str, Any]]:
        body = self.body if isinstance(self.body, dict) else {}
        messages = body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def prompt_text(self) -> str:
        return "\n".join(content_text(m.get("content")) for m in self.messages if isinstance(m, dict))


Responder = Callable[[RecordedRequest], StubReply]


class StubHold:
    """Replies wait here until the test lets them go: a slow upstream whose pace the test decides, instead of
    delays it has to guess. A step is the start of a reply (a whole non-streamed reply, or the head and first
    chunk of a stream), or one more streamed chunk. Requests are recorded before they wait."""

    def __init__(self) -> None:
        self._allowed = 0
        self._released = False
        self._changed = asyncio.Condition()

    async def allow(self, steps: int = 1) -> None:
        """Let `steps` more steps through."""
        async with self._changed:
            self._allowed += steps
            self._changed.notify_all()

    async def release(self) -> None:
        """Let everything through from now on."""
        async with self._changed:
            self._released = True
            self._changed.notify_all()

    async def step(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._released or self._allowed > 0)
            if not self._released:
                self._allowed -= 1


def echo_responder(request: RecordedRequest) -> StubReply:
    user = [content_text(m.get("content")) for m in request.messages if m.get("role") == "user"]
    return StubReply(content=f"stub answer to: {user[-1] if user else ''}")


def content_text(content: Any) -> str:
    """A message's text: the string, or the text parts of a list of content parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _consecutive_user_turns(messages: list[Any]) -> bool:
    roles = [m.get("role") for m in messages if isinstance(m, dict)]
    return any(a == b == "user" for a, b in pairwise(roles))


# DeepSeek's error "type" per status; a wrong type (e.g. rate_limit on a 400) makes LiteLLM misclassify.
_ERROR_TYPES = {401: "authentication_error", 402: "insufficient_balance", 429: "rate_limit_error"}


def _default_type(status: int) -> str:
    return "server_error" if status >= 500 else "invalid_request_error"


def _error(status: int, message: str, err_type: str, headers: dict[str, str] | None = None) -> web.Response:
    payload = {"error": {"message": message, "type": err_type, "param": None, "code": err_type}}
    return web.json_response(payload, status=status, headers=headers)


class DeepSeekStub:
    """`async with DeepSeekStub() as stub:` then point the client at `stub.base_url` with `stub.api_key`."""

    def __init__(
        self,
        *,
        api_key: str | None = "sk-stub-key",
        cache_hit_tokens: int = 0,
        responder: Responder = echo_responder,
        strict_turns: bool = False,
    ) -> None:
        self.api_key = api_key
        # deepseek-reasoner is reported (2025) to refuse two user messages in a row; off by default.
        self.strict_turns = strict_turns
        self.cache_hit_tokens = cache_hit_tokens
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        # Streamed answers whose client closed the connection before the end (a cancelled run).
        self.closed_by_client: list[RecordedRequest] = []
        self._queue: deque[StubReply | StubFault] = deque()
        self._runner: web.AppRunner | None = None
        self._received = asyncio.Condition()
        self._hold: StubHold | None = None
        self.base_url = ""

    def hold_replies(self) -> StubHold:
        """From now on every reply waits for the returned hold (see StubHold)."""
        self._hold = StubHold()
        return self._hold

    async def wait_for_requests(self, count: int = 1) -> None:
        """Until `count` requests have arrived (bound it with `asyncio.timeout`)."""
        async with self._received:
            await self._received.wait_for(lambda: len(self.requests) >= count)

    async def wait_for_client_close(self, count: int = 1) -> None:
        """Until `count` streamed answers were cut off by their client (bound it with `asyncio.timeout`)."""
        async with self._received:
            await self._received.wait_for(lambda: len(self.closed_by_client) >= count)

    def enqueue(self, *items: StubReply | StubFault) -> None:
        self._queue.extend(items)

    def enqueue_json(self, obj: object) -> None:
        self._queue.append(StubReply(content=json.dumps(obj, ensure_ascii=False)))

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/chat/completions", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        # Short grace period on close: a test that timed out leaves a deliberately slow handler behind.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        host, bound_port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{bound_port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> DeepSeekStub:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        recorded = RecordedRequest(path=request.path, headers=dict(request.headers), body=body)
        self.requests.append(recorded)
        async with self._received:
            self._received.notify_all()
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Authentication Fails, Your api key is invalid", "authentication_error")
        if not isinstance(body, dict):
            return _error(400, "Failed to deserialize the JSON body", "invalid_request_error")
        rejected = self._validate(body, recorded)
        if rejected is not None:
            return rejected
        item = self._queue.popleft() if self._queue else self.responder(recorded)
        stream = body.get("stream") is True
        if isinstance(item, StubFault):
            return await self._fault(request, item, stream)
        if self._hold is not None:
            await self._hold.step()
        if item.delay_seconds:
            await asyncio.sleep(item.delay_seconds)
        usage = self._usage(item, recorded)
        if not stream:
            return web.json_response(self._completion(body, item, usage))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = self._chunks(body, item, usage if include_usage else None)
        try:
            return await self._stream(request, chunks, pause=item.chunk_delay_seconds, stall=item, hold=self._hold)
        except ConnectionResetError:
            self.closed_by_client.append(recorded)
            async with self._received:
                self._received.notify_all()
            return web.Response()

    def _validate(self, body: dict[str, Any], recorded: RecordedRequest) -> web.Response | None:
        if body.get("model") not in KNOWN_MODELS:
            return _error(400, "Model Not Exist", "invalid_request_error")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return _error(422, "messages: field required", "invalid_request_error")
        response_format = body.get("response_format")
        fmt = response_format.get("type") if isinstance(response_format, dict) else None
        if response_format is not None and fmt not in ("text", "json_object"):
            return _error(400, "This response_format type is unavailable now", "invalid_request_error")
        if self.strict_turns and _consecutive_user_turns(body["messages"]):
            return _error(400, "consecutive user messages are not allowed", "invalid_request_error")
        if fmt == "json_object" and "json" not in recorded.prompt_text.lower():
            message = "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'."
            return _error(400, message, "invalid_request_error")
        return None

    def _usage(self, reply: StubReply, recorded: RecordedRequest) -> dict[str, Any]:
        if reply.usage is not None:
            prompt, completion, hit = (
                reply.usage.prompt_tokens,
                reply.usage.completion_tokens,
                reply.usage.cache_hit_tokens,
            )
        else:
            prompt = count_tokens(recorded.prompt_text) + 4 * len(recorded.messages)
            answer = reply.content + "".join(c.name + c.arguments for c in reply.tool_calls)
            completion = max(1, count_tokens(answer))
            hit = min(self.cache_hit_tokens, prompt)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": hit},
            "prompt_cache_hit_tokens": hit,
            "prompt_cache_miss_tokens": prompt - hit,
        }

    @staticmethod
    def _completion(body: dict[str, Any], reply: StubReply, usage: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning_content:
            message["reasoning_content"] = reply.reasoning_content
        if reply.tool_calls:
            message["tool_calls"] = [
                {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for i, c in enumerate(reply.tool_calls)
            ]
        return {
            "id": "stub-completion",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
            "usage": usage,
            "system_fingerprint": "fp_stub",
        }

    @staticmethod
    def _chunks(body: dict[str, Any], reply: StubReply, usage: dict[str, Any] | None) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        thought = reply.reasoning_content
        step = reply.chunk_chars
        deltas += [{"reasoning_content": thought[i : i + step], "content": None} for i in range(0, len(thought), step)]
        text = reply.content
        deltas += [{"content": text[i : i + reply.chunk_chars]} for i in range(0, len(text), reply.chunk_chars)]
        for index, call in enumerate(reply.tool_calls):
            head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            deltas.append({"tool_calls": [head]})
            half = len(call.arguments) // 2
            for part in (call.arguments[:half], call.arguments[half:]):
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        base = {
            "id": "stub-chunk",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
        }
        chunks = [
            {**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]} for d in deltas
        ]
        last: dict[str, Any] = {
            **base,
            "choices": [{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": reply.finish_reason}],
        }
        if usage is not None:
            last["usage"] = usage
        return [*chunks, last]

    @staticmethod
    async def _stream(
        request: web.Request,
        chunks: list[dict[str, Any]],
        drop_after: int | None = None,
        pause: float = 0.0,
        stall: StubReply | None = None,
        hold: StubHold | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for sent, chunk in enumerate(chunks):
            if drop_after is not None and sent >= drop_after:
                # Drop the TCP connection without the chunked-encoding terminator, like a proxy cutting the line.
                if request.transport is not None:
                    request.transport.abort()
                return response
            if hold is not None and sent:
                await hold.step()
            if pause and sent:
                await asyncio.sleep(pause)
            if stall is not None and sent == stall.stall_after_chunks:
                await asyncio.sleep(stall.stall_seconds)
            await response.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _fault(self, request: web.Request, fault: StubFault, stream: bool) -> web.StreamResponse:
        if fault.kind == "status":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            return _error(
                fault.status, fault.message, _ERROR_TYPES.get(fault.status, _default_type(fault.status)), headers
            )
        if fault.kind == "invalid_json":
            return web.Response(body=b'{"id": "broken", "choices": [', content_type="application/json")
        if not stream or fault.after_chunks == 0:
            if request.transport is not None:
                request.transport.abort()
            return web.Response()
        reply = StubReply(content=fault.content or "this answer will be cut off " * 4, chunk_chars=fault.chunk_chars)
        chunks = self._chunks({"model": "deepseek-chat"}, reply, None)
        return await self._stream(request, chunks, drop_after=fault.after_chunks)
