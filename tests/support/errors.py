"""The one JSON error shape, as a whole expected body (the request id is the response's own)."""

from __future__ import annotations

from typing import Any

import httpx


def error_body(
    response: httpx.Response, code: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "details": details or [],
            "request_id": response.headers["x-request-id"],
            "error_id": None,
        }
    }
