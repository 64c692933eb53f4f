"""One error tree for the engine; the HTTP layer renders every subclass with one handler."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(default_factory=list, description="Path of the offending field, if any.")
    msg: str
    type: str | None = None


class AppError(Exception):
    status_code: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, details: list[ErrorDetail] | None = None, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.extra = extra or {}


class BadRequestError(AppError):
    status_code = 400
    code = "bad_request"


class UnauthorizedError(AppError):
    status_code = 401
    code = "unauthorized"


class NotFoundError(AppError):
    status_code = 404
    code = "not_found"


class ConflictError(AppError):
    status_code = 409
    code = "conflict"


class RunInProgressError(ConflictError):
    code = "run_in_progress"


class PayloadTooLargeError(AppError):
    status_code = 413
    code = "payload_too_large"


class ValidationFailedError(AppError):
    status_code = 422
    code = "validation_error"


class UpstreamError(AppError):
    status_code = 502
    code = "upstream_error"
