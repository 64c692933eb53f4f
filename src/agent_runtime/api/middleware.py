"""Pure-ASGI middleware: request id, JSON access log, HTTP metrics, ambiguous framing refused, request body limit
and read timeout, and shedding run requests while the process is full.

Not BaseHTTPMiddleware: that wraps streaming responses (our SSE runs) in an extra task and
buffers in ways that break disconnect detection.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
import uuid
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_runtime.api.errors import ErrorBody, ErrorResponse
from agent_runtime.db.outage import outage_behind
from agent_runtime.engine.errors import AppError, DatabaseUnavailableError
from agent_runtime.logging_setup import request_id_var
from agent_runtime.observability import metrics
from agent_runtime.observability.tracing import annotate_current

log = logging.getLogger("agent_runtime.access")
error_log = logging.getLogger("agent_runtime.api.errors")
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# A client can send any method name: only these become label values.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# How much of an oversized body is read and thrown away before the 413, as a multiple of the limit.
# Common clients (Python's urllib and requests, curl without Expect) send the whole body before reading
# the response; closing with unread data makes the kernel answer with a reset, and they report that
# instead of the 413 (most attempts with urllib: docs/benchmarks.md, "Transport limits"). Draining costs time,
# not memory, and
# the body read timeout bounds the time; past this much the client gets the reset after all.
_DRAIN_FACTOR = 8


class _BodyRefused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _route_template(scope: Scope) -> str:
    """The matched route's path template (`/v1/sessions/{session_id}`): a bounded label, unlike the path.
    The router records the route in the scope it shares with us; nothing matched (404, 413) is `unmatched`."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


# Raises the AppError a request gets without reaching the app (sets `scope["route"]` for the metrics' label).
Shedder = Callable[[Scope], None]


async def _send_json_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    request_id: str,
    *,
    error_id: str | None = None,
    close: bool,
    retry_after: float | None = None,
) -> None:
    """The error shape of `api.errors`, for the responses this middleware gives before or instead of the app."""
    body = ErrorResponse(error=ErrorBody(code=code, message=message, request_id=request_id, error_id=error_id))
    content = body.model_dump_json().encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        (b"x-request-id", request_id.encode()),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(math.ceil(retry_after)).encode()))
    if close:  # the request body was not (all) read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


class RequestContextMiddleware:
    """Assigns X-Request-ID, enforces the body limit and read timeout, and writes one access-log line per request.

    `shed` refuses a request before the app sees it: a run request while the process is full or draining gets
    its 429/503 here, before routing, authentication and body validation. In a burst of run requests those
    cost the loop enough per refusal to keep the last client waiting (docs/benchmarks.md, "Burst of 500").
    """

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, body_timeout_seconds: float, shed: Shedder | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds
        self.shed = shed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id")
        request_id = incoming if incoming and _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        annotate_current(request_id=request_id)
        started = time.perf_counter()
        status_holder = [0]

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            if _header(scope, b"content-length") is not None and _header(scope, b"transfer-encoding") is not None:
                # h11 frames such a body by Transfer-Encoding (as RFC 9112 says), but a proxy in front that frames
                # by Content-Length would read a different request out of the same bytes: request smuggling.
                # RFC 9112 6.1 lets a server refuse it; the connection closes, so nothing left over is parsed.
                status_holder[0] = 400
                await _send_json_error(
                    send,
                    400,
                    "ambiguous_framing",
                    "a request must not carry both Content-Length and Transfer-Encoding",
                    request_id,
                    close=True,
                )
                return
            try:
                replay = await self._read_body(scope, receive)
            except _BodyRefused as refused:
                status_holder[0] = refused.status
                await _send_json_error(send, refused.status, refused.code, refused.message, request_id, close=True)
                return
            if self.shed is not None:
                try:
                    self.shed(scope)
                except AppError as refusal:  # after the body is read: the connection could carry the next request
                    status_holder[0] = refusal.status_code
                    await _send_json_error(
                        send,
                        refusal.status_code,
                        refusal.code,
                        refusal.message,
                        request_id,
                        # ... but not while the process drains: the client's next request belongs elsewhere.
                        close=refusal.code == "shutting_down",
                        retry_after=refusal.retry_after,
                    )
                    return
            try:
                await self.app(scope, replay, send_with_id)
            except Exception as exc:
                if status_holder[0]:
                    raise  # the response has begun: nothing to replace it with
                if outage_behind(exc):
                    # A lost connection the pool did not translate (db/outage.py) is still no server bug.
                    error_log.warning("database unavailable", exc_info=True)
                    unavailable = DatabaseUnavailableError()
                    status_holder[0] = unavailable.status_code
                    await _send_json_error(
                        send,
                        unavailable.status_code,
                        unavailable.code,
                        unavailable.message,
                        request_id,
                        close=False,
                        retry_after=unavailable.retry_after,
                    )
                    return
                # Here and not in an app exception handler: Starlette runs those outside this middleware,
                # where the request id is gone from the logs and the response.
                error_id = uuid.uuid4().hex
                error_log.exception("unhandled error", extra={"error_id": error_id})
                annotate_current(error_id=error_id)
                status_holder[0] = 500
                await _send_json_error(
                    send, 500, "internal_error", "internal server error", request_id, error_id=error_id, close=False
                )
        finally:
            seconds = time.perf_counter() - started
            status = status_holder[0] or 500
            method = str(scope.get("method"))
            log.info(
                "request",
                extra={
                    "method": method,
                    "path": scope.get("path"),
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "client": (scope.get("client") or ("-",))[0],
                },
            )
            metrics.http_request(
                method if method in _KNOWN_METHODS else "other", _route_template(scope), status, seconds
            )
            request_id_var.reset(token)

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive:
        """Buffer the whole body within the limit and the read timeout; later receives pass through.

        Buffering first is what makes the limit reliable for chunked uploads too: FastAPI turns any
        error raised while it reads the body into a generic 400, so the check cannot live inside it.
        Raises `_BodyRefused` (413 or 408) once whatever is worth reading of the body has been read.
        """
        declared = _header(scope, b"content-length")
        if declared is None and _header(scope, b"transfer-encoding") is None:
            return receive  # no body (a GET, a DELETE): nothing to wait for
        too_large = _BodyRefused(413, "payload_too_large", f"request body exceeds {self.max_body_bytes} bytes")
        drain_limit = self.max_body_bytes * _DRAIN_FACTOR
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            expects_continue = (_header(scope, b"expect") or "").lower() == "100-continue"
            if expects_continue or int(declared) > drain_limit:
                raise too_large  # the client waits for our answer before sending, or would send too much
        try:
            async with asyncio.timeout(self.body_timeout_seconds):
                pending = await self._receive_within(receive, too_large, drain_limit)
        except TimeoutError:
            raise _BodyRefused(
                408, "request_timeout", f"request body not received within {self.body_timeout_seconds:g} s"
            ) from None

        async def replay() -> Message:
            if pending:
                return pending.pop(0)
            return await receive()

        return replay

    async def _receive_within(self, receive: Receive, too_large: _BodyRefused, drain_limit: int) -> list[Message]:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return [message]  # the client left: the app sees the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size > self.max_body_bytes:
                chunks.clear()  # from here on the body is only drained, never kept
                if not more or size > drain_limit:
                    raise too_large
            else:
                chunks.append(chunk)
            if not more and size <= self.max_body_bytes:
                return [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
