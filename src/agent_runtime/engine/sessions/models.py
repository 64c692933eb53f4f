"""Session models: what the API returns and accepts."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from agent_runtime.engine.text import ClientText

SessionStatus = Literal["pending", "running", "completed", "failed"]


class StateSnapshot(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: SessionStatus
    run_id: str | None = None
    error_id: str | None = None


class Session(BaseModel):
    id: UUID
    title: str | None
    status: SessionStatus
    state_snapshot: StateSnapshot
    error_id: str | None = Field(description="Set when the last run failed; also in the logs and the RUN_ERROR event.")
    billing_currency: Literal["CNY"]
    billing_country_snapshot: str = Field(description="The caller's profile country when the session was created.")
    model: str | None
    created_at: datetime
    updated_at: datetime


# Unicode White_Space, spelled out: Python's `str.split()`, ECMA's and Rust's `\s` each differ a little, and
# the OpenAPI pattern below must mean exactly what the check means for every client and validator.
_SPACE = "\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_SPACES = re.compile(f"[{_SPACE}]+")
# Something besides spaces, and no NUL.
TITLE_SCHEMA: dict[str, JsonValue] = {"pattern": f"^[^\\u0000]*[^{_SPACE}\\u0000][^\\u0000]*$"}


class _TitleInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("title", mode="after", check_fields=False)
    @classmethod
    def _normalize_title(cls, value: str | None) -> str | None:
        if value is None:
            return None
        normalized = _SPACES.sub(" ", value).strip(" ")
        if not normalized:
            raise ValueError("title must not be blank")
        return normalized


# What Swagger UI's "Try it out" sends (it generated titles from the pattern otherwise); the route repeats it for
# the optional body, whose schema is a union that Swagger UI would pick a branch of at random.
SESSION_CREATE_EXAMPLES: list[JsonValue] = [{"title": "Weekend trip to Hangzhou"}, {}]


class SessionCreate(_TitleInput):
    model_config = ConfigDict(json_schema_extra={"examples": SESSION_CREATE_EXAMPLES})

    title: ClientText | None = Field(
        default=None,
        max_length=200,
        description="Optional; else set from the first message. Spaces are collapsed; blank is refused.",
        json_schema_extra=TITLE_SCHEMA,
    )


class SessionUpdate(_TitleInput):
    model_config = ConfigDict(json_schema_extra={"examples": [{"title": "Hangzhou, day two"}]})

    title: ClientText = Field(
        max_length=200, description="Spaces are collapsed; blank is refused.", json_schema_extra=TITLE_SCHEMA
    )
