"""HTTP transport limits for `agent-runtime serve`: what a client can hold before any authentication.

Before these limits (uvicorn's defaults, httptools parser) a huge header was buffered whole and stalled
`/health/live`, a few at once took the process's memory up by gigabytes, and partial requests were held forever
(docs/benchmarks.md, "Transport limits"). What uvicorn 0.54 offers, and what fills the gaps:

- header size: only its h11 parser has a bound (`h11_max_incomplete_event_size`), and it is not one: h11
  checks it only while a head is still incomplete, so a 100 KB head that arrived in one read was parsed and
  answered 200. `_HeaderDeadlineH11` counts the head's bytes itself, before h11 parses it, however the head
  was written (one write, many, pipelined after another request), and answers a JSON 431 past
  MAX_HEADER_BYTES. httptools has no bound at all; we run h11 (its cost: docs/benchmarks.md, "HTTP parser");
- idle keep-alive connections: `timeout_keep_alive`; connections and requests at once: `limit_concurrency`
  (past it uvicorn answers 503 itself, before the app);
- header read timeout: uvicorn has none (its keep-alive timer starts only after a first response, and any
  byte cancels it). `_HeaderDeadlineH11` below closes a connection whose request head is not complete
  within the deadline, counted from the connection or from the first byte of a later request;
- body read timeout: in `RequestContextMiddleware` (a JSON 408), since the app reads every body there.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import Any, TypedDict

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agent_runtime.api.errors import ErrorBody, ErrorResponse
from agent_runtime.settings import Settings

log = logging.getLogger("agent_runtime.api.transport")
# Where h11 ends a request head (`h11._receivebuffer.blank_line_regex`): a blank line, CRLF or bare LF.
_END_OF_HEAD = re.compile(b"\n\r?\n")
# After a 431 the rest of what the client sent is read and dropped, up to this much, before the close: a client
# that sends its whole head before reading (most do) would otherwise get a reset instead of the 431, as with
# the body's 413 (api/middleware.py, `_DRAIN_FACTOR`). Past it, or after `_LINGER_SECONDS`, just the close.
_LINGER_BYTES = 1_048_576
_LINGER_SECONDS = 2.0


class _HeaderDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline for each request head (request line and headers)."""

    header_timeout: float  # set on the subclass `header_deadline_protocol` builds
    max_header_bytes: int  # likewise: the bound on a request head (request line, headers, blank line)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        # How far the current head has been searched for its end (h11's buffer only grows until it ends).
        self._head_searched = 0
        # Bytes dropped after a 431, or None while the connection serves requests.
        self._discarded: int | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A connection that sends nothing at all is held by uvicorn until the client leaves.
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if self._discarded is not None:
            self._discarded += len(data)
            if self._discarded > _LINGER_BYTES:
                self.transport.close()
            return
        super().data_received(data)
        if self._discarded is not None:
            return  # refused just now
        if self.conn.their_state is h11.IDLE:
            # Still reading a request head: the first byte of a later request on this connection starts its clock
            # (until then the connection is idle, which `timeout_keep_alive` bounds).
            if self._header_deadline is None:
                self._arm_header_deadline()
        else:
            self._cancel_header_deadline()

    def handle_events(self) -> None:
        # uvicorn calls this after every read and again for a pipelined request once a response is complete:
        # each time a head is about to be parsed, h11's buffer starts with it, and holds everything received.
        if self.conn.their_state is h11.IDLE and self._head_too_large():
            self._refuse_head()
            return
        super().handle_events()

    def _head_too_large(self) -> bool:
        # h11's buffer, read in place: `Connection.trailing_data` would copy it on every read. h11 is pinned
        # (uv.lock; api/PATCHES.md), and tests/server/test_transport_limits.py fails if this stops seeing the head.
        buffered = self.conn._receive_buffer._data
        limit = self.max_header_bytes
        end = _END_OF_HEAD.search(buffered, max(0, self._head_searched - 2), limit)  # so end.end() <= limit
        if end is not None:  # the whole head is in, within the limit: the next head starts a new search
            self._head_searched = 0
            return False
        self._head_searched = min(len(buffered), limit)
        return len(buffered) > limit

    def _refuse_head(self) -> None:
        self._cancel_header_deadline()
        self._unset_keepalive_if_required()
        self._discarded = 0
        request_id = uuid.uuid4().hex
        log.warning("request head too large", extra={"request_id": request_id, "limit": self.max_header_bytes})
        message = f"request head exceeds {self.max_header_bytes} bytes"
        body = ErrorResponse(error=ErrorBody(code="header_too_large", message=message, request_id=request_id))
        content = body.model_dump_json().encode()
        # Written as bytes: h11 has no request to answer, and the connection ends with this response.
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nx-request-id: %s\r\nconnection: close\r\n\r\n%s"
            % (len(content), request_id.encode(), content)
        )
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the client sees the end of the response while we drop what it sends
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._header_deadline = self.loop.call_later(self.header_timeout, self._header_deadline_passed)

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_deadline_passed(self) -> None:
        self._header_deadline = None
        # No response is possible here: h11 (and HTTP) have no request to answer yet. nginx does the same.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def header_deadline_protocol(header_timeout: float, max_header_bytes: int) -> type[H11Protocol]:
    """The protocol class to hand uvicorn: its `http` option takes a class, built per configured limits."""
    limits = {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes}
    return type("HeaderDeadlineH11Protocol", (_HeaderDeadlineH11,), limits)


class UvicornLimits(TypedDict):
    http: type[H11Protocol]
    h11_max_incomplete_event_size: int
    timeout_keep_alive: int
    limit_concurrency: int


def uvicorn_limits(settings: Settings) -> UvicornLimits:
    """Keyword arguments for `uvicorn.run` / `uvicorn.Config`."""
    return UvicornLimits(
        http=header_deadline_protocol(settings.http_header_timeout_seconds, settings.max_header_bytes),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.http_keep_alive_seconds,
        limit_concurrency=settings.http_max_concurrency,
    )
