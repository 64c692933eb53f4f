"""A local stand-in for the DeepSeek chat API (OpenAI-compatible) for tests and benchmarks.

It validates requests the way the real API does, answers from a scripted queue or a default responder, can inject
faults, and records every request it received. The rules it applies, and where each comes from (DeepSeek's API
docs as of December 2026):

- Models (https://api-docs.deepseek.com/zh-cn/quick_start/pricing/): `deepseek-flash` (DeepSeek-V4.1-Flash) and
  `deepseek-v4-pro`; the legacy id `deepseek-v4-flash` is still accepted and served by V4.1 Flash, so the stub
  counts it in deepseek-flash's concurrency and cache. `deepseek-chat` and `deepseek-reasoner` were retired on
  2026-07-24 15:59 UTC (https://api-docs.deepseek.com/). Any other id: HTTP 400 "Model Not Exist" (the message of
  the real API; for a retired id the stub adds why). The answer echoes the requested id as `model`.
- Thinking mode (https://api-docs.deepseek.com/guides/thinking_mode): on unless the request sends
  `"thinking": {"type": "disabled"}`; `reasoning_effort` minimal/low/medium/high/xhigh/max/ultra maps to
  low/high/max (default high). In thinking mode the answer carries `reasoning_content` beside `content` (streamed
  as `delta.reasoning_content` chunks before the content and tool calls); temperature, presence_penalty and
  frequency_penalty are accepted and ignored. An assistant message that called tools must carry its
  `reasoning_content` in every later thinking-mode request, else 400 "The `reasoning_content` in the thinking mode
  must be passed back to the API.". In a thinking-mode request that carries `tools`, every earlier assistant message
  must carry it, tool calls or not: the zh-cn guide asks for the reasoning of every assistant message between two
  user messages once the model called a tool there, and a third-party test (2026-10-06) got this 400 from
  `deepseek-v4-pro` for an answer's missing reasoning (`deepseek-flash` was lax: `lax_reasoning_models`). The docs'
  tool-call sample output (https://api-docs.deepseek.com/api_samples/thinking_mode_api_example_tool_call_output)
  shows reasoning on every sub-turn of a tool loop.
- Concurrency (https://api-docs.deepseek.com/quick_start/rate_limit): per account and model, from the request until
  its answer is complete, all user_ids combined: 2,500 for deepseek-flash, 500 for deepseek-v4-pro; past it HTTP 429.
- `user_id` (same page): isolates content safety, KV cache and scheduling per end user of an account.
- JSON Output (https://api-docs.deepseek.com/guides/json_mode): `response_format` `{"type": "json_object"}` needs the
  word "json" in the prompt; other types than text/json_object answer 400 "This response_format type is unavailable
  now"; output that cannot be recognised as JSON is replaced by spaces (U+0020), finish_reason still "stop".
- Images (https://api-docs.deepseek.com/guides/vision): `deepseek-flash` (and the legacy `deepseek-v4-flash`, served
  by it) take user `content` as a list of blocks, `{"type": "text"}` and `{"type": "image_url", "image_url": {"url"}}`
  with a `data:image/...;base64,` or http(s) URL; the format is sniffed from the bytes (JPEG, PNG, GIF, WebP).
  `deepseek-v4-pro` is text only: the stub answers 400 to an image for it (the message is the stub's own). An
  image's prompt tokens are counted as IMAGE_TOKENS each (the stub's figure; DeepSeek reports its own in
  `prompt_tokens`).
- max_tokens caps the output including the reasoning (thinking mode guide): a longer answer is cut there with
  finish_reason "length".
- Errors (https://api-docs.deepseek.com/quick_start/error_codes): 400/401/402/422/429/500/503 in the shape
  `{"error": {"message", "type", "param": null, "code"}}`.

Where the stub is stricter than DeepSeek, or assumes what the docs leave open:
- The reasoning passed back must also equal what this stub produced with that message for the same API key and
  user_id (`strict_reasoning`, on by default): for a tool call, by its id; for an answer, by its text (the whole
  content, or a string in its JSON: the service stores the answer's text, not its JSON). A message the stub
  produced with thinking off may carry anything (LiteLLM's single-space placeholder); an answer whose text the
  stub never produced only needs the field present. DeepSeek only needs it present: LiteLLM injects a single space
  when the history lost it, which DeepSeek takes but which blinds the model, and a history wired to another user's
  calls passes too.
- `user_id` must match [a-zA-Z0-9_-]+ and be at most 512 bytes of UTF-8, else 400: one version of the rate-limit
  page requires the pattern, another only recommends it. The messages of this 400, and of a bad `thinking`,
  `reasoning_effort` or `max_tokens`, are the stub's own (the docs do not give them).
- Per-user_id concurrency limits (accounts with a raised quota) are not modelled. A request counts against the
  limit once it passed validation; a rejected request does not.
- The JSON blanking keeps the first JSON object embedded in the output and blanks the rest; the docs do not say
  how much around valid JSON is blanked. max_tokens drops a tool call that does not fit whole.
- In thinking mode the stub reasons on every answer, deterministically ("Thinking (<effort> effort) about: <start of
  the last user message>"), unless the reply scripts it. Token counts come from `count_tokens` (a rough word and
  punctuation count, not DeepSeek's tokenizer).
- `strict_turns` applies a 2025 report about deepseek-reasoner (no two user messages in a row); off by default.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterator, Mapping
from itertools import pairwise
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Self

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

ACCEPTED_MODELS = frozenset({"deepseek-flash", "deepseek-v4-pro", "deepseek-v4-flash"})
IMAGE_MODELS = frozenset({"deepseek-flash", "deepseek-v4-flash"})
IMAGE_TOKENS = 384
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"RIFF")
RETIRED_MODELS = frozenset({"deepseek-chat", "deepseek-reasoner"})
# The model that serves an id: its concurrency and KV cache are that model's.
SERVED_BY = MappingProxyType({"deepseek-v4-flash": "deepseek-flash"})
DEFAULT_CONCURRENCY_LIMITS: Mapping[str, int] = MappingProxyType({"deepseek-flash": 2500, "deepseek-v4-pro": 500})
EFFORTS = MappingProxyType(
    {"minimal": "low", "low": "low", "medium": "high", "high": "high", "xhigh": "high", "max": "max", "ultra": "max"}
)
PASSBACK_MESSAGE = "The `reasoning_content` in the thinking mode must be passed back to the API."
REPORTED_LAX = frozenset({"deepseek-flash"})
"""Served models reported to check only tool-call messages' reasoning (a third-party test, 2026-10-06)."""
USER_ID_MAX_BYTES = 512
_USER_ID_RE = re.compile(r"[a-zA-Z0-9_-]+")
_TOKEN_RE = re.compile(r"[\u3400-\u9fff]|\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def cut_tokens(text: str, tokens: int) -> str:
    """The start of `text` that holds its first `tokens` tokens, as `count_tokens` counts them."""
    for seen, match in enumerate(_TOKEN_RE.finditer(text), 1):
        if seen > tokens:
            return text[: match.start()].rstrip()
    return text


def prompt_tokens(recorded: RecordedRequest) -> int:
    """What the stub bills as a request's prompt (its own rough count, not DeepSeek's tokenizer)."""
    messages = recorded.messages
    return count_tokens(recorded.prompt_text) + 4 * len(messages) + IMAGE_TOKENS * len(image_urls(messages))


def served_model(model: str) -> str:
    return SERVED_BY.get(model, model)


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Thinking mode is DeepSeek's default: only `"thinking": {"type": "disabled"}` turns it off."""
    thinking = body.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")


def content_text(content: Any) -> str:
    """A message's text: the string, or the text parts of a list of content parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def image_urls(messages: list[Any]) -> list[str]:
    """The `image_url` URLs of every message's content blocks, in order."""
    urls: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                urls.append(str((part.get("image_url") or {}).get("url", "")))
    return urls


def _image_error(model: str, messages: list[Any]) -> str | None:
    urls = image_urls(messages)
    if urls and model not in IMAGE_MODELS:
        return f"stub: the model {model} does not support image input"
    for url in urls:
        if url.startswith(("https://", "http://")):
            continue
        head, _, data = url.partition(",")
        if not (head.startswith("data:image/") and head.endswith(";base64")):
            return "Invalid image_url: expected a data:image/...;base64, URL or an http(s) URL"
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return "Invalid image: the base64 data cannot be decoded"
        if not raw.startswith(_IMAGE_MAGIC):
            return "Invalid image: the format is not JPEG, PNG, GIF or WebP"
    return None


def blank_non_json(content: str) -> str:
    """JSON Output's answer: content that is not JSON becomes spaces, keeping an embedded JSON object."""
    try:
        json.loads(content)
    except ValueError:
        pass
    else:
        return content
    start = content.find("{")
    if start >= 0:
        try:
            _, end = json.JSONDecoder().raw_decode(content, start)
        except ValueError:
            pass
        else:
            return " " * start + content[start:end] + " " * (len(content) - end)
    return " " * len(content)


class StubToolCall(BaseModel):
    id: str
    name: str
    arguments: str = "{}"


class StubUsage(BaseModel):
    """Explicit usage for a reply; otherwise it is counted from the request and the answer."""

    prompt_tokens: int
    completion_tokens: int
    cache_hit_tokens: int = 0
    reasoning_tokens: int = 0


class StubReply(BaseModel):
    content: str = ""
    reasoning_content: str | None = Field(
        default=None,
        min_length=1,
        description="The reasoning sent before the content. None: what the model would do (the stub's own "
        "reasoning in thinking mode, none otherwise). Scripting it for a request with thinking disabled is a test "
        "bug the stub answers with a 400.",
    )
    tool_calls: list[StubToolCall] = Field(default_factory=list)
    usage: StubUsage | None = None
    delay_seconds: float = Field(default=0.0, description="Wait before the first byte (slow upstream).")
    chunk_chars: int = Field(default=4, ge=1, description="Characters of content per streamed chunk.")
    chunk_delay_seconds: float = Field(default=0.0, description="Pause between streamed chunks.")
    stall_after_chunks: int | None = Field(default=None, description="Go silent after this many chunks...")
    stall_seconds: float = Field(default=0.0, description="...for this long, then carry on.")


class StubFault(BaseModel):
    kind: Literal["status", "disconnect", "invalid_json"]
    status: int = 500
    message: str = "Service is too busy, please retry later."
    retry_after: str | None = None
    after_chunks: int = Field(default=2, description="Chunks streamed before a `disconnect` drops the line.")
    content: str | None = Field(default=None, description="The reply a `disconnect` streams before it drops.")
    chunk_chars: int = Field(default=4, ge=1, description="Characters of `content` per streamed chunk.")


class EndUser(BaseModel):
    """Whose request it is: DeepSeek isolates the KV cache (and this stub its reasoning records) per API key and
    `user_id`; requests without a user_id share one namespace of their key."""

    model_config = ConfigDict(frozen=True)

    api_key: str
    user_id: str | None


class RecordedRequest(BaseModel):
    path: str
    headers: dict[str, str]
    body: Any = Field(description="Parsed JSON body, or None when it was not valid JSON.")
    raw: bytes = Field(default=b"", repr=False, description="The body as it arrived, byte for byte.")
    billed: UsagePayload | None = Field(
        default=None, description="The usage of the answer the stub sent whole (None: not answered, or a fault)."
    )
    streamed: str = Field(default="", description="The content and reasoning a streamed answer sent so far.")

    @property
    def fields(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.fields.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def prompt_text(self) -> str:
        return "\n".join(content_text(m.get("content")) for m in self.messages if isinstance(m, dict))

    @property
    def user_id(self) -> str | None:
        user_id = self.fields.get("user_id")
        return user_id if isinstance(user_id, str) else None

    @property
    def end_user(self) -> EndUser:
        return EndUser(api_key=self.headers.get("Authorization", "").removeprefix("Bearer "), user_id=self.user_id)

    @property
    def thinking_enabled(self) -> bool:
        return thinking_enabled(self.fields)

    @property
    def effort(self) -> str:
        """The effort the model reasons with (DeepSeek maps the requested one)."""
        return EFFORTS.get(str(self.fields.get("reasoning_effort", "high")), "high")


Responder = Callable[[RecordedRequest], StubReply]


class Rejection(BaseModel):
    """A request DeepSeek refuses before answering."""

    status: int
    message: str


class StubAnswer(BaseModel):
    """What the stub answers: the scripted reply after DeepSeek's rules (reasoning, max_tokens, JSON blanking)."""

    content: str
    reasoning_content: str | None
    tool_calls: list[StubToolCall]
    finish_reason: Literal["stop", "tool_calls", "length"]
    completion_tokens: int = Field(description="Tokens generated, reasoning included, before any JSON blanking.")
    reasoning_tokens: int


class WirePayload(BaseModel):
    """DeepSeek's JSON: a None field is left out, except those DeepSeek sends as null (`sent_as_null`)."""

    sent_as_null: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None or key in self.sent_as_null}

    def wire(self) -> dict[str, Any]:
        data: dict[str, Any] = self.model_dump(mode="json")
        return data


class ErrorDetail(WirePayload):
    sent_as_null = frozenset({"param"})

    message: str
    type: str
    param: None = None
    code: str


class ErrorPayload(WirePayload):
    error: ErrorDetail


class FunctionPayload(WirePayload):
    name: str | None = None
    arguments: str


class ToolCallPayload(WirePayload):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionPayload


class MessagePayload(WirePayload):
    role: Literal["assistant"] = "assistant"
    content: str
    reasoning_content: str | None = None
    tool_calls: list[ToolCallPayload] | None = None


class CachedTokens(WirePayload):
    cached_tokens: int


class ReasoningTokens(WirePayload):
    reasoning_tokens: int


class UsagePayload(WirePayload):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: CachedTokens
    prompt_cache_hit_tokens: int
    prompt_cache_miss_tokens: int
    completion_tokens_details: ReasoningTokens

    @classmethod
    def of(cls, prompt: int, completion: int, hit: int, reasoning: int) -> UsagePayload:
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=CachedTokens(cached_tokens=hit),
            prompt_cache_hit_tokens=hit,
            prompt_cache_miss_tokens=prompt - hit,
            completion_tokens_details=ReasoningTokens(reasoning_tokens=reasoning),
        )


class Choice(WirePayload):
    sent_as_null = frozenset({"logprobs"})

    index: int = 0
    message: MessagePayload
    logprobs: None = None
    finish_reason: str


class Completion(WirePayload):
    id: str = "stub-completion"
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: UsagePayload
    system_fingerprint: str = "fp_stub"


class Delta(WirePayload):
    sent_as_null = frozenset({"content"})

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallPayload] | None = None


class ChunkChoice(WirePayload):
    sent_as_null = frozenset({"logprobs", "finish_reason"})

    index: int = 0
    delta: Delta
    logprobs: None = None
    finish_reason: str | None = None


class Chunk(WirePayload):
    id: str = "stub-chunk"
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsagePayload | None = None


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


def answer_message(answer: StubAnswer) -> MessagePayload:
    """The assistant message of a non-streamed answer (what a client keeps, and sends back later)."""
    calls = [
        ToolCallPayload(index=i, id=c.id, type="function", function=FunctionPayload(name=c.name, arguments=c.arguments))
        for i, c in enumerate(answer.tool_calls)
    ]
    return MessagePayload(content=answer.content, reasoning_content=answer.reasoning_content, tool_calls=calls or None)


def echo_responder(request: RecordedRequest) -> StubReply:
    user = [content_text(m.get("content")) for m in request.messages if m.get("role") == "user"]
    return StubReply(content=f"stub answer to: {user[-1] if user else ''}")


def _consecutive_user_turns(messages: list[Any]) -> bool:
    roles = [m.get("role") for m in messages if isinstance(m, dict)]
    return any(a == b == "user" for a, b in pairwise(roles))


class _Produced:
    """What the stub answered one end user: the reasonings it sent with each tool call id and with each answer's
    texts (None: it answered with thinking off)."""

    def __init__(self) -> None:
        self._calls: defaultdict[str, set[str | None]] = defaultdict(set)
        self._texts: defaultdict[str, set[str | None]] = defaultdict(set)

    def add(self, answer: StubAnswer) -> None:
        for call in answer.tool_calls:
            self._calls[call.id].add(answer.reasoning_content)
        if not answer.tool_calls:
            for text in _answer_texts(answer.content):
                self._texts[text].add(answer.reasoning_content)

    def gave(self, call_ids: list[str], text: str, reasoning: str) -> bool:
        """Whether `reasoning` may come back with the message of these tool calls, or of this answer's text. Tool
        call ids must be the stub's own (a history wired to another user's calls fails); an answer's text may not be
        (the service rewrites the last answer's text), and then any reasoning passes."""
        if call_ids:
            return all(None in self._calls[i] or reasoning in self._calls[i] for i in call_ids)
        sent = self._texts.get(text)
        return sent is None or None in sent or reasoning in sent


def _answer_texts(content: str | None) -> set[str]:
    """The content, and every string inside it when it is JSON (a stage's contract)."""
    texts = {content} if content else set()
    try:
        parsed: Any = json.loads(content or "")
    except ValueError:
        return texts
    pending = [parsed]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            texts.add(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return texts


def _delta_text(chunk: dict[str, Any]) -> str:
    """The content and reasoning a streamed chunk carries."""
    choices = chunk.get("choices") or [{}]
    delta = choices[0].get("delta") or {}
    return str(delta.get("reasoning_content") or "") + str(delta.get("content") or "")


def _tool_call_ids(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    return [str(c.get("id")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


class _Budget:
    """max_tokens spent in output order (reasoning, content, tool calls): what does not fit is cut."""

    def __init__(self, tokens: int | None, count: Callable[[str], int], cut: Callable[[str, int], str]) -> None:
        self._left = tokens
        self._count = count
        self._cut = cut
        self.used = 0
        self.cut = False

    def take(self, text: str) -> str:
        """`text`, or as much of it as the budget left allows."""
        if self.cut:
            return ""
        tokens = self._count(text)
        if self._left is not None and tokens > self._left:
            text, tokens = self._cut(text, self._left), self._left
            self.cut = True
        self.used += tokens
        if self._left is not None:
            self._left -= tokens
        return text

    def fits(self, text: str) -> bool:
        """Whether all of `text` fits (a tool call is sent whole or not at all)."""
        tokens = self._count(text)
        if self.cut or (self._left is not None and tokens > self._left):
            self.cut = True
            return False
        self.used += tokens
        if self._left is not None:
            self._left -= tokens
        return True


# DeepSeek's error "type" per status; a wrong type (e.g. rate_limit on a 400) makes LiteLLM misclassify.
_ERROR_TYPES = {401: "authentication_error", 402: "insufficient_balance", 429: "rate_limit_error"}


def _default_type(status: int) -> str:
    return "server_error" if status >= 500 else "invalid_request_error"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    err_type = _ERROR_TYPES.get(status, _default_type(status))
    payload = ErrorPayload(error=ErrorDetail(message=message, type=err_type, code=err_type))
    return web.json_response(payload.wire(), status=status, headers=headers)


class DeepSeekStub:
    """`async with DeepSeekStub() as stub:` then point the client at `stub.base_url` with `stub.api_key`."""

    def __init__(
        self,
        *,
        api_key: str | None = "sk-stub-key",
        cache_hit_tokens: int = 0,
        responder: Responder = echo_responder,
        strict_turns: bool = False,
        strict_reasoning: bool = True,
        lax_reasoning_models: Collection[str] = (),
        json_blanking: bool = True,
        concurrency_limits: Mapping[str, int] = DEFAULT_CONCURRENCY_LIMITS,
        concurrency_retry_after: str | None = None,
    ) -> None:
        self.api_key = api_key
        self.strict_turns = strict_turns
        self.strict_reasoning = strict_reasoning
        # Served models that check only the reasoning of tool-call messages (REPORTED_LAX: flash, as reported).
        self.lax_reasoning_models = frozenset(lax_reasoning_models)
        self.json_blanking = json_blanking
        # Per served model; a model missing from the mapping has no limit.
        self.concurrency_limits = dict(concurrency_limits)
        self.concurrency_retry_after = concurrency_retry_after
        self.cache_hit_tokens = cache_hit_tokens
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        # Streamed answers whose client closed the connection before the end (a cancelled run).
        self.closed_by_client: list[RecordedRequest] = []
        self._queue: deque[StubReply | StubFault] = deque()
        self._runner: web.AppRunner | None = None
        self._received = asyncio.Condition()
        self._hold: StubHold | None = None
        self._in_flight: defaultdict[str, int] = defaultdict(int)
        self._produced: defaultdict[EndUser, _Produced] = defaultdict(_Produced)
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

    async def __aenter__(self) -> Self:
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
        recorded = RecordedRequest(path=request.path, headers=dict(request.headers), body=body, raw=raw)
        self.requests.append(recorded)
        async with self._received:
            self._received.notify_all()
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Authentication Fails, Your api key is invalid")
        if not isinstance(body, dict):
            return _error(400, "Failed to deserialize the JSON body")
        rejected = self._validate(body, recorded)
        if rejected is not None:
            return _error(rejected.status, rejected.message)
        pool = served_model(body["model"])
        limit = self.concurrency_limits.get(pool)
        if limit is not None and self._in_flight[pool] >= limit:
            retry = {"Retry-After": self.concurrency_retry_after} if self.concurrency_retry_after is not None else None
            return _error(429, "Rate Limit Reached", retry)
        # In flight until the answer is complete (streamed to its end, or cut off).
        self._in_flight[pool] += 1
        try:
            return await self._reply(request, body, recorded)
        finally:
            self._in_flight[pool] -= 1

    async def _reply(self, request: web.Request, body: dict[str, Any], recorded: RecordedRequest) -> web.StreamResponse:
        item = self._queue.popleft() if self._queue else self.responder(recorded)
        stream = body.get("stream") is True
        if isinstance(item, StubFault):
            return await self._fault(request, item, body["model"], stream)
        if item.reasoning_content is not None and not recorded.thinking_enabled:
            return _error(400, "stub: the scripted reply has reasoning_content but the request disabled thinking")
        if self._hold is not None:
            await self._hold.step()
        if item.delay_seconds:
            await asyncio.sleep(item.delay_seconds)
        answer = self._answer(item, recorded)
        self._produced[recorded.end_user].add(answer)
        usage = self._usage(item, answer, recorded)
        if not stream:
            recorded.billed = usage
            return web.json_response(self._completion(body["model"], answer, usage).wire())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = self._chunks(body["model"], answer, item.chunk_chars, usage if include_usage else None)
        try:
            streamed = await self._stream(
                request, chunks, pause=item.chunk_delay_seconds, stall=item, hold=self._hold, recorded=recorded
            )
            recorded.billed = usage
            return streamed
        except ConnectionResetError:
            self.closed_by_client.append(recorded)
            async with self._received:
                self._received.notify_all()
            return web.Response()

    def _validate(self, body: dict[str, Any], recorded: RecordedRequest) -> Rejection | None:
        model = body.get("model")
        if model in RETIRED_MODELS:
            retired = f"Model Not Exist ({model} was retired on 2026-07-24; use deepseek-flash or deepseek-v4-pro)"
            return Rejection(status=400, message=retired)
        if model not in ACCEPTED_MODELS:
            return Rejection(status=400, message="Model Not Exist")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return Rejection(status=422, message="messages: field required")
        message = (
            self._parameter_error(body, recorded)
            or _image_error(str(model), body["messages"])
            or self._history_error(recorded)
        )
        return Rejection(status=400, message=message) if message is not None else None

    @staticmethod
    def _parameter_error(body: dict[str, Any], recorded: RecordedRequest) -> str | None:
        response_format = body.get("response_format")
        fmt = response_format.get("type") if isinstance(response_format, dict) else None
        if response_format is not None and fmt not in ("text", "json_object"):
            return "This response_format type is unavailable now"
        if fmt == "json_object" and "json" not in recorded.prompt_text.lower():
            return "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'."
        user_id = body.get("user_id")
        if user_id is not None and not (
            isinstance(user_id, str) and _USER_ID_RE.fullmatch(user_id) and len(user_id.encode()) <= USER_ID_MAX_BYTES
        ):
            return f"Invalid user_id: a string of [a-zA-Z0-9_-]+, at most {USER_ID_MAX_BYTES} bytes"
        thinking = body.get("thinking")
        if thinking is not None and not (
            isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled")
        ):
            return 'Invalid thinking: expected {"type": "enabled"} or {"type": "disabled"}'
        if "reasoning_effort" in body and body["reasoning_effort"] not in EFFORTS:
            return f"Invalid reasoning_effort: expected one of {', '.join(EFFORTS)}"
        max_tokens = body.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            return "Invalid max_tokens: expected a positive integer"
        return None

    def _history_error(self, recorded: RecordedRequest) -> str | None:
        if self.strict_turns and _consecutive_user_turns(recorded.messages):
            return "consecutive user messages are not allowed"
        if not recorded.thinking_enabled:
            return None
        every = bool(recorded.fields.get("tools")) and (
            served_model(str(recorded.fields.get("model"))) not in self.lax_reasoning_models
        )
        produced = self._produced[recorded.end_user]
        for index, message in enumerate(recorded.messages):
            if message.get("role") != "assistant":
                continue
            ids = _tool_call_ids(message)
            if not ids and not every:
                continue
            reasoning = message.get("reasoning_content")
            if not isinstance(reasoning, str) or not reasoning:
                return PASSBACK_MESSAGE
            if self.strict_reasoning and not produced.gave(ids, content_text(message.get("content")), reasoning):
                return (
                    f"{PASSBACK_MESSAGE} (stub, stricter than DeepSeek: message {index} passes back a reasoning this "
                    "stub did not send with it for this API key and user_id)"
                )
        return None

    def _count(self, text: str) -> int:
        return count_tokens(text)

    def _cut(self, text: str, tokens: int) -> str:
        return cut_tokens(text, tokens)

    def _answer(self, reply: StubReply, recorded: RecordedRequest) -> StubAnswer:
        """The reply as DeepSeek would send it: reasoning in thinking mode, cut at max_tokens, JSON blanked."""
        reasoning = reply.reasoning_content
        if reasoning is None and recorded.thinking_enabled:
            user = [content_text(m.get("content")) for m in recorded.messages if m.get("role") == "user"]
            reasoning = f"Thinking ({recorded.effort} effort) about: {user[-1][:80] if user else 'the request'}"
        max_tokens = recorded.fields.get("max_tokens")
        budget: int | None = max_tokens if isinstance(max_tokens, int) else None
        parts = _Budget(budget, self._count, self._cut)
        reasoning = parts.take(reasoning) if reasoning is not None else None
        content = parts.take(reply.content)
        calls = [call for call in reply.tool_calls if parts.fits(call.name + call.arguments)]
        response_format = recorded.fields.get("response_format")
        json_mode = isinstance(response_format, dict) and response_format.get("type") == "json_object"
        if parts.cut:
            finish: Literal["stop", "tool_calls", "length"] = "length"
        else:
            finish = "tool_calls" if calls else "stop"
        reasoning_tokens = self._count(reasoning) if reasoning is not None else 0
        return StubAnswer(
            content=blank_non_json(content) if json_mode and self.json_blanking else content,
            reasoning_content=reasoning,
            tool_calls=calls,
            finish_reason=finish,
            completion_tokens=max(1, parts.used),
            reasoning_tokens=reasoning_tokens,
        )

    def _usage(self, reply: StubReply, answer: StubAnswer, recorded: RecordedRequest) -> UsagePayload:
        if reply.usage is not None:
            given = reply.usage
            return UsagePayload.of(
                given.prompt_tokens, given.completion_tokens, given.cache_hit_tokens, given.reasoning_tokens
            )
        prompt = prompt_tokens(recorded)
        hit = min(self.cache_hit_tokens, prompt)
        return UsagePayload.of(prompt, answer.completion_tokens, hit, answer.reasoning_tokens)

    @staticmethod
    def _completion(model: str, answer: StubAnswer, usage: UsagePayload) -> Completion:
        choice = Choice(message=answer_message(answer), finish_reason=answer.finish_reason)
        return Completion(created=int(time.time()), model=model, choices=[choice], usage=usage)

    @staticmethod
    def _deltas(answer: StubAnswer, chunk_chars: int) -> Iterator[Delta]:
        yield Delta(role="assistant", content="")
        thought = answer.reasoning_content or ""
        for i in range(0, len(thought), chunk_chars):
            yield Delta(reasoning_content=thought[i : i + chunk_chars])
        text = answer.content
        for i in range(0, len(text), chunk_chars):
            yield Delta(content=text[i : i + chunk_chars])
        for index, call in enumerate(answer.tool_calls):
            head = FunctionPayload(name=call.name, arguments="")
            yield Delta(tool_calls=[ToolCallPayload(index=index, id=call.id, type="function", function=head)])
            half = len(call.arguments) // 2
            for part in (call.arguments[:half], call.arguments[half:]):
                yield Delta(tool_calls=[ToolCallPayload(index=index, function=FunctionPayload(arguments=part))])

    def _chunks(self, model: str, answer: StubAnswer, chunk_chars: int, usage: UsagePayload | None) -> list[Chunk]:
        created = int(time.time())
        chunks = [
            Chunk(created=created, model=model, choices=[ChunkChoice(delta=delta)])
            for delta in self._deltas(answer, chunk_chars)
        ]
        last = ChunkChoice(delta=Delta(content=""), finish_reason=answer.finish_reason)
        return [*chunks, Chunk(created=created, model=model, choices=[last], usage=usage)]

    @staticmethod
    async def _stream(
        request: web.Request,
        chunks: list[Chunk],
        drop_after: int | None = None,
        pause: float = 0.0,
        stall: StubReply | None = None,
        hold: StubHold | None = None,
        recorded: RecordedRequest | None = None,
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
            wire = chunk.wire()
            await response.write(f"data: {json.dumps(wire, ensure_ascii=False)}\n\n".encode())
            if recorded is not None:
                recorded.streamed += _delta_text(wire)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _fault(self, request: web.Request, fault: StubFault, model: str, stream: bool) -> web.StreamResponse:
        if fault.kind == "status":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            return _error(fault.status, fault.message, headers)
        if fault.kind == "invalid_json":
            return web.Response(body=b'{"id": "broken", "choices": [', content_type="application/json")
        if not stream or fault.after_chunks == 0:
            if request.transport is not None:
                request.transport.abort()
            return web.Response()
        text = fault.content or "this answer will be cut off " * 4
        answer = StubAnswer(
            content=text,
            reasoning_content=None,
            tool_calls=[],
            finish_reason="stop",
            completion_tokens=1,
            reasoning_tokens=0,
        )
        return await self._stream(
            request, self._chunks(model, answer, fault.chunk_chars, None), drop_after=fault.after_chunks
        )
