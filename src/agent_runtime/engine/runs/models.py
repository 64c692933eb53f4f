"""What a run takes in."""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from agent_runtime.engine.memory.messages import ToolMessage, UserMessage
from agent_runtime.engine.runs.frontend_tools import FrontendTool
from agent_runtime.engine.text import ClientText

MAX_MESSAGE_CHARS = 20_000
MAX_CONTEXT_ITEMS = 10
# New user messages one request may add (a client sends its turn, not a transcript).
MAX_NEW_MESSAGES = 10
MAX_RESUME_ENTRIES = 20


class ContextItem(BaseModel):
    """Extra context from the client (AG-UI `Context`): shown to the model as untrusted data."""

    model_config = ConfigDict(extra="forbid")

    description: ClientText = Field(max_length=200)
    value: ClientText = Field(max_length=2_000)


class ResumeDecision(BaseModel):
    """The answer to one interrupt (AG-UI `ResumeEntry`): run the tool (with edited arguments) or not."""

    model_config = ConfigDict(extra="forbid")

    interrupt_id: ClientText = Field(min_length=1, max_length=300)
    status: Literal["resolved", "cancelled"]
    # Any JSON: its shape is the interrupt's `responseSchema` ({"arguments": {...}}), checked against the
    # tool's own schema when the run is planned.
    payload: JsonValue = Field(
        default=None, description='For "resolved": optionally {"arguments": {...}} replacing the model\'s arguments.'
    )


class RunRequest(BaseModel):
    """Body of `POST /v1/sessions/{id}/runs`: a new user message, or the answers to pending interrupts."""

    model_config = ConfigDict(extra="forbid")

    message: ClientText | None = Field(
        default=None, min_length=1, max_length=MAX_MESSAGE_CHARS, description="The user's message."
    )
    message_id: ClientText | None = Field(
        default=None, min_length=1, max_length=200, description="Client id for the message; generated if absent."
    )
    context: list[ContextItem] = Field(default_factory=list, max_length=MAX_CONTEXT_ITEMS)
    resume: list[ResumeDecision] = Field(
        default_factory=list,
        max_length=MAX_RESUME_ENTRIES,
        description="Answers to the interrupts the previous run ended with (approve, edit, or deny each tool call).",
    )

    @model_validator(mode="after")
    def _message_or_resume(self) -> RunRequest:
        if (self.message is None) == (not self.resume):
            raise ValueError("send either a message or resume entries (not both)")
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
