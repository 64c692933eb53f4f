"""What a run takes in."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from agent_runtime.engine.conversation.chat_messages import ToolMessage, UserMessage
from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.runs.request.frontend_tools import FrontendTool
from agent_runtime.engine.runs.request.images import ImageInput
from agent_runtime.engine.text import ClientText

MAX_MESSAGE_CHARS = 20_000
MAX_CONTEXT_ITEMS = 10
# New user messages one request may add (a client sends its turn, not a transcript).
MAX_NEW_MESSAGES = 10
MAX_RESUME_ENTRIES = 20


class ContextItem(BaseModel):
    """Extra context from the client (AG-UI `Context`): shown to the model as untrusted data."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"description": "The screen the user is on", "value": "Profile settings"}]},
    )

    description: ClientText = Field(max_length=200)
    value: ClientText = Field(max_length=2_000)


class ResumeDecision(BaseModel):
    """The answer to one interrupt (AG-UI `ResumeEntry`): run the tool (with edited arguments) or not."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"interrupt_id": "approve-call_00_Mq3x4", "status": "resolved"},
                {
                    "interrupt_id": "approve-call_00_Mq3x4",
                    "status": "resolved",
                    "payload": {"arguments": {"bio": "Hiker and amateur astronomer."}},
                },
                {"interrupt_id": "approve-call_00_Mq3x4", "status": "cancelled"},
            ]
        },
    )

    interrupt_id: ClientText = Field(min_length=1, max_length=300)
    status: Literal["resolved", "cancelled"]
    # Any JSON: its shape is the interrupt's `responseSchema` ({"arguments": {...}}), checked against the
    # tool's own schema when the run is planned.
    payload: JsonValue = Field(
        default=None, description='For "resolved": optionally {"arguments": {...}} replacing the model\'s arguments.'
    )


class ToolResult(BaseModel):
    """The client's result for a frontend tool call the thread waits for (AG-UI: a `tool` message)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"tool_call_id": "call_00_Mq3x4", "content": '{"shown": true}'}]},
    )

    tool_call_id: ClientText = Field(min_length=1, max_length=200)
    content: ClientText = Field(max_length=MAX_MESSAGE_CHARS)
    message_id: ClientText | None = Field(
        default=None, min_length=1, max_length=200, description="Client id for the result; generated if absent."
    )

    def message(self) -> ToolMessage:
        return ToolMessage(
            tool_call_id=self.tool_call_id, content=self.content, **({"id": self.message_id} if self.message_id else {})
        )


def _not_null(schema: dict[str, Any]) -> None:
    # Absent when the body carries `resume` instead: null is not a value the field takes.
    branches = [branch for branch in schema.pop("anyOf", []) if branch.get("type") != "null"]
    if branches:
        schema.update(branches[0])


class RunRequest(BaseModel):
    """Body of `POST /v1/sessions/{id}/runs`: a new user message, or the answers to pending interrupts."""

    # OpenAPI says which members a body needs: `message`, `resume` or `tool_results`, never `message` with
    # `resume`, and `images` only with `message` (the validator below). The examples are what Swagger UI's
    # "Try it out" sends (the first one): without them it generated a body from the field patterns, with
    # `message` and `resume` together, a 422.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["message"]},
                {"required": ["resume"]},
                {"required": ["tool_results"]},
                {"required": ["regenerate"], "properties": {"regenerate": {"const": True}}},
            ],
            "not": {"required": ["message", "resume"]},
            "dependentRequired": {"images": ["message"]},
            "examples": [
                {"message": "What is 12 * 7?"},
                {
                    "message": "Which time zone am I in?",
                    "message_id": "msg-2f9c",
                    "context": [{"description": "The screen the user is on", "value": "Profile settings"}],
                },
                {"resume": [{"interrupt_id": "approve-call_00_Mq3x4", "status": "resolved"}]},
                {"message": "Thanks!", "tool_results": [{"tool_call_id": "call_00_Mq3x4", "content": "{}"}]},
                {"regenerate": True},
            ],
        },
    )

    message: ClientText | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MESSAGE_CHARS,
        description="The user's message.",
        json_schema_extra=_not_null,
    )
    message_id: ClientText | None = Field(
        default=None, min_length=1, max_length=200, description="Client id for the message; generated if absent."
    )
    images: list[ImageInput] = Field(
        default_factory=list,
        max_length=32,
        description="Images of the message (needs `message`): base64 `data` with its `mime_type`, or an https `url` "
        "the provider fetches; at most MAX_IMAGES_PER_MESSAGE, each at most MAX_IMAGE_BYTES.",
    )
    context: list[ContextItem] = Field(default_factory=list, max_length=MAX_CONTEXT_ITEMS)
    resume: list[ResumeDecision] = Field(
        default_factory=list,
        min_length=1,
        max_length=MAX_RESUME_ENTRIES,
        description="Answers to the interrupts the previous run ended with (approve, edit, or deny each tool call).",
    )
    tool_results: list[ToolResult] = Field(
        default_factory=list,
        min_length=1,
        max_length=MAX_RESUME_ENTRIES,
        description="Results for the frontend tool calls the previous run ended with (its `pendingToolCallIds`); "
        "with a `message` too, they close the calls and the new message runs.",
    )

    regenerate: bool = Field(
        default=False,
        strict=True,
        description="Answer the thread's last user turn again (engine/runs/request/regenerate.py): the previous "
        "reply becomes audit, the new one the visible one; alone (or with `context`), else a 422 naming the field.",
    )

    @model_validator(mode="after")
    def _message_or_resume(self) -> RunRequest:
        if self.message is not None and self.resume:
            raise ValueError("send either a message or resume entries (not both)")
        if self.images and self.message is None:
            raise ValueError("images go with a message")
        if self.message is None and not self.resume and not self.tool_results and not self.regenerate:
            raise ValueError("send a message, resume entries or tool results (or regenerate)")
        return self


class IgnoredMessage(BaseModel):
    """A client message that was neither stored nor shown to the model, and why."""

    id: str
    role: str
    reason: str


class RunInput(BaseModel):
    """A run, independent of the endpoint: what the client adds to the thread, and how the run may go on."""

    new_messages: list[UserMessage] = Field(default_factory=list, max_length=MAX_NEW_MESSAGES)
    tool_results: list[ToolMessage] = Field(default_factory=list, description="Answers to pending frontend calls.")
    resume: list[ResumeDecision] = Field(default_factory=list)
    context: list[ContextItem] = Field(default_factory=list)
    frontend_tools: list[FrontendTool] = Field(default_factory=list)
    client_state: dict[str, JsonValue] | None = Field(default=None, description="AG-UI state, stored as data.")
    ignored: list[IgnoredMessage] = Field(default_factory=list)
    run_id: UUID | None = Field(default=None, description="The client's run id (AG-UI runId), when it is a UUID.")
    legacy: bool = Field(
        default=False, description="An AG-UI client that declared no protocol version 1.0 or newer (pre-1.0 schemas)."
    )
    regenerate: bool = Field(default=False, description="Answer the last user turn again (request/regenerate.py).")


_MAX_EVENT_SEQ = 2_147_483_647
# What our SSE frames' `id:` lines carry (the run id must also be the run's: checked by parse_last_event_id).
LAST_EVENT_ID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}:[0-9]{1,10}$"


def parse_last_event_id(run_id: UUID, raw: str | None, *, where: list[str | int]) -> int:
    """The seq in a `Last-Event-ID` (`<run_id>:<seq>`, as our SSE frames' `id:` lines carry it); 0 when absent."""
    if raw is None or raw == "":
        return 0
    named, _, seq = raw.strip().partition(":")
    problem = None
    try:
        if UUID(named) != run_id:
            problem = "names another run"
    except ValueError:
        problem = "must be <run_id>:<seq>, as the stream's `id:` lines carry it"
    if problem is None and not (seq.isascii() and seq.isdigit() and int(seq) <= _MAX_EVENT_SEQ):
        problem = "must be <run_id>:<seq>, as the stream's `id:` lines carry it"
    if problem is not None:
        raise ValidationFailedError(f"invalid Last-Event-ID: {problem}", details=[ErrorDetail(loc=where, msg=problem)])
    return int(seq)


class RunCancel(BaseModel):
    """Answer of `POST .../runs/{run_id}/cancel`."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "6b0f2c9e-4d1a-4c3b-9e8f-1a2b3c4d5e6f", "status": "running"}]}
    )

    id: UUID
    status: Literal["running", "completed", "failed", "cancelled"] = Field(
        description="The run's status when the cancel was recorded: `running` while it is being stopped "
        "(it then ends with RUN_FINISHED outcome `cancelled`); anything else: it had ended, nothing changed."
    )
