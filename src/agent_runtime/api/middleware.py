"""Pure-ASGI middleware: request id, JSON access log, HTTP metrics, request body limit.

Not BaseHTTPMiddleware: that wraps streaming responses (our SSE runs) in an extra task and
buffers in ways that break disconnect detection.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_runtime.logging_setup import request_id_var
from agent_runtime.observability import metrics
from agent_runtime.observability.tracing import annotate_current

log = logging.getLogger("agent_runtime.access")
error_log = logging.getLogger("agent_runtime.api.errors")
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# A client can send any method name: only these become label values.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


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


async def _send_json_error(
    send: Send, status: int, code: str, message: str, request_id: str, error_id: str | None = None
) -> None:
    body = json.dumps(
        {"error": {"code": code, "message": message, "details": [], "request_id": request_id, "error_id": error_id}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-request-id", request_id.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestContextMiddleware:
    """Assigns X-Request-ID, enforces the body limit, and writes one access-log line per request."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

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
            replay = await self._read_body(scope, receive)
            if replay is None:
                status_holder[0] = 413
                await _send_json_error(
                    send, 413, "payload_too_large", f"request body exceeds {self.max_body_bytes} bytes", request_id
                )
                return
            try:
                await self.app(scope, replay, send_with_id)
            except Exception:
                if status_holder[0]:
                    raise  # the response has begun: nothing to replace it with
                # Here and not in an app exception handler: Starlette runs those outside this middleware,
                # where the request id is gone from the logs and the response.
                error_id = uuid.uuid4().hex
                error_log.exception("unhandled error", extra={"error_id": error_id})
                annotate_current(error_id=error_id)
                status_holder[0] = 500
                await _send_json_error(send, 500, "internal_error", "internal server error", request_id, error_id)
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

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive | None:
        """Buffer the body up to the limit (None when over it); later receives pass through.

        Buffering first is what makes the limit reliable for chunked uploads too: FastAPI turns any
        error raised while it reads the body into a generic 400, so the check cannot live inside it.
        """
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return None
        if scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE") and declared in (None, "0"):
            return receive
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending: list[Message] = [message]
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
                break

        async def replay() -> Message:
            if pending:
                return pending.pop(0)
            return await receive()

        return replay
