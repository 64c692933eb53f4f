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


def approval_interrupt_id(tool_call_id: str) -> str:
    """The AG-UI interrupt id of a tool call that waits for the user's approval (what `resume` answers)."""
    return f"approve-{tool_call_id}"


class WaitingCall(BaseModel):
    kind: Literal["approval", "frontend_tool"] = Field(
        description='approval: the user approves or denies it, answered by a run with `{"resume": [{"interrupt_id", '
        '"status": "resolved"|"cancelled", "payload"?}]}` (`payload.arguments` may replace the arguments); '
        'frontend_tool: the client runs it and answers with `{"tool_results": [{"tool_call_id", "content"}]}`.'
    )
    tool_call_id: str = Field(description="The model's tool call id (also on the stored tool-call message).")
    name: str = Field(description="The tool's name.")
    arguments: str = Field(description="The call's arguments as the model wrote them (JSON text).")
    interrupt_id: str | None = Field(description="For an approval: the `interrupt_id` its `resume` answer names.")


_WAITING_EXAMPLE: dict[str, JsonValue] = {
    "run_id": "5b0c1c2e-7d1a-4b7e-9a51-2c0f7c1c9e11",
    "calls": [
        {
            "kind": "approval",
            "tool_call_id": "call_0",
            "name": "update_bio",
            "arguments": '{"bio": "Kayaker from Lofoten"}',
            "interrupt_id": "approve-call_0",
        }
    ],
}


class WaitingTurn(BaseModel):
    """What a turn waits for before it can go on: the calls of the model reply it stopped at that need an answer.
    A new user message instead closes it (its calls are answered as not run)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_WAITING_EXAMPLE]})

    run_id: str = Field(description="The run that stopped to wait (it ended `completed`).")
    calls: list[WaitingCall] = Field(min_length=1)


class _StoredCall(BaseModel):
    id: str
    name: str
    arguments: str
    kind: Literal["approval", "frontend", "server"]


class _StoredPendingTurn(BaseModel):
    """Of the session's `pending_turn` (engine/runs/request/pending.py, `PendingTurn`), what a client sees."""

    run_id: str
    calls: list[_StoredCall]


def waiting_turn(pending_turn: object) -> WaitingTurn | None:
    """The client's view of a session's stored `pending_turn` (None: the session waits for nothing)."""
    if pending_turn is None:
        return None
    stored = _StoredPendingTurn.model_validate(pending_turn)
    calls = [
        WaitingCall(
            kind="approval" if call.kind == "approval" else "frontend_tool",
            tool_call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            interrupt_id=approval_interrupt_id(call.id) if call.kind == "approval" else None,
        )
        for call in stored.calls
        if call.kind != "server"
    ]
    return WaitingTurn(run_id=stored.run_id, calls=calls) if calls else None


class Session(BaseModel):
    id: UUID
    title: str | None
    status: SessionStatus
    state_snapshot: StateSnapshot
    waiting_for: WaitingTurn | None = Field(
        description="What the session's last turn waits for (approvals, frontend tools) with what answers it; null "
        "when nothing. The status says `completed` then: the run that stopped ended."
    )
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
