"""One JSON error shape for every 4xx/5xx: the handlers here, and the 500 in `RequestContextMiddleware`."""

from __future__ import annotations

import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent_runtime.engine.errors import AppError, ErrorDetail
from agent_runtime.engine.text import ERROR_TYPE, first_unstorable
from agent_runtime.logging_setup import request_id_var

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    503: "unavailable",
}


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. not_found, validation_error, run_in_progress.")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)
    request_id: str | None = None
    error_id: str | None = Field(default=None, description="Set on server errors; also in the logs.")


class ErrorResponse(BaseModel):
    error: ErrorBody


def error_json(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    body = ErrorBody(code=code, message=message, request_id=request_id_var.get(), **extra)
    return JSONResponse(status_code=status, content=ErrorResponse(error=body).model_dump(mode="json"))


_DESCRIPTIONS = {
    400: "Malformed request: a body that is not UTF-8 JSON, or nested too deeply to parse.",
    401: "Missing, invalid or expired bearer token.",
    404: "Not found (also for resources owned by another user).",
    409: "Conflict, e.g. a run is already in progress on this session.",
    408: "The request body did not arrive within HTTP_BODY_TIMEOUT_SECONDS.",
    413: "Request body too large (MAX_REQUEST_BYTES).",
    422: "Invalid request: `details` names each offending field.",
    402: "`budget_exceeded`: your daily or monthly CNY budget is used up; the message says which and when it "
    "resets (also `Retry-After`).",
    429: "`server_busy` (this process is full), `too_many_runs` (your runs in progress), `rate_limited` (your runs "
    "per minute), `too_many_searches` (your memory searches in flight or per minute): retry after `Retry-After` "
    "seconds; `too_many_sessions`: delete some.",
    503: "Not ready, shutting down (`shutting_down`), without its database (`database_unavailable`), or running as "
    "many memory searches as it may (`search_busy`); all with `Retry-After`.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries so that /docs shows the error shape for each status a route can return."""
    return {s: {"model": ErrorResponse, "description": _DESCRIPTIONS.get(s, "Error.")} for s in statuses}


def app_error_json(exc: AppError) -> JSONResponse:
    response = error_json(exc.status_code, exc.code, exc.message, details=exc.details, **exc.extra)
    if exc.retry_after is not None:
        response.headers["Retry-After"] = str(math.ceil(exc.retry_after))
    return response


async def _app_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    return app_error_json(exc)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Unstorable text anywhere in a JSON body is one error at its JSON path, whatever pydantic made of it
    # (a lone surrogate fails every branch of a union, one error each, with union tags in their paths).
    found = first_unstorable(exc.body, ["body"])
    if found is not None:
        detail = ErrorDetail(loc=found.loc, msg=found.problem, type=ERROR_TYPE)
        return error_json(422, "validation_error", f"invalid request: {_dotted(detail.loc)}", details=[detail])
    details = [
        ErrorDetail(
            loc=[str(p) if not isinstance(p, int) else p for p in e.get("loc", ())], msg=e["msg"], type=e["type"]
        )
        for e in exc.errors()
    ]
    fields = ", ".join(_dotted(d.loc) for d in details)
    return error_json(422, "validation_error", f"invalid request: {fields}", details=details)


def _dotted(loc: list[str | int]) -> str:
    return ".".join(str(p) for p in loc)


def _allowed_methods(request: Request) -> str:
    """Every method the path takes, as the OpenAPI document lists them. Starlette's 405 names only the first
    route that matched the path, and FastAPI makes one route per method (GET and PUT /v1/profile are two),
    so its `Allow` was short; FastAPI's included routers keep their routes out of reach, the document not."""
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), request.url.path):
            methods |= {method.upper() for method in operations}
    if "GET" in methods:
        methods.add("HEAD")  # Starlette answers HEAD wherever it answers GET
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code
    response = error_json(exc.status_code, code, message)
    if exc.headers:
        response.headers.update(exc.headers)
    if exc.status_code == 405:
        response.headers["Allow"] = _allowed_methods(request)
    return response


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # Unexpected exceptions become the same JSON 500 in RequestContextMiddleware (which knows the request id).
