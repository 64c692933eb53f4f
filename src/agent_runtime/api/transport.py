"""HTTP transport limits for `agent-runtime serve`: what a client can hold before any authentication.

Before these limits (uvicorn's defaults, httptools parser) a huge header was buffered whole and stalled
`/health/live`, a few at once took the process's memory up by gigabytes, and partial requests were held forever
(docs/benchmarks.md, "Transport limits"). What uvicorn 0.54 offers, and what fills the gaps:

- header size: only its h11 parser has a bound (`h11_max_incomplete_event_size`; past it uvicorn answers
  400 and closes); httptools has none, so we run h11. It costs more server CPU per request, which matters
  for the cheapest requests only, not beside a run (docs/benchmarks.md, "HTTP parser"). Keeping httptools
  would mean counting head bytes in our own protocol subclass instead;
- idle keep-alive connections: `timeout_keep_alive`; connections and requests at once: `limit_concurrency`
  (past it uvicorn answers 503 itself, before the app);
- header read timeout: uvicorn has none (its keep-alive timer starts only after a first response, and any
  byte cancels it). `_HeaderDeadlineH11` below closes a connection whose request head is not complete
  within the deadline, counted from the connection or from the first byte of a later request;
- body read timeout: in `RequestContextMiddleware` (a JSON 408), since the app reads every body there.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agent_runtime.settings import Settings


class _HeaderDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline for each request head (request line and headers)."""

    header_timeout: float  # set on the subclass `header_deadline_protocol` builds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A connection that sends nothing at all is held by uvicorn until the client leaves.
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            # Still reading a request head: the first byte of a later request on this connection starts its clock
            # (until then the connection is idle, which `timeout_keep_alive` bounds).
            if self._header_deadline is None:
                self._arm_header_deadline()
        else:
            self._cancel_header_deadline()

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


def header_deadline_protocol(header_timeout: float) -> type[H11Protocol]:
    """The protocol class to hand uvicorn: its `http` option takes a class, built per configured deadline."""
    return type("HeaderDeadlineH11Protocol", (_HeaderDeadlineH11,), {"header_timeout": header_timeout})


class UvicornLimits(TypedDict):
    http: type[H11Protocol]
    h11_max_incomplete_event_size: int
    timeout_keep_alive: int
    limit_concurrency: int


def uvicorn_limits(settings: Settings) -> UvicornLimits:
    """Keyword arguments for `uvicorn.run` / `uvicorn.Config`."""
    return UvicornLimits(
        http=header_deadline_protocol(settings.http_header_timeout_seconds),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.http_keep_alive_seconds,
        limit_concurrency=settings.http_max_concurrency,
    )
