"""What a run takes in."""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.memory.messages import ChatMessage
from agent_runtime.engine.text import ClientText

MAX_MESSAGE_CHARS = 20_000
MAX_CONTEXT_ITEMS = 10


class ContextItem(BaseModel):
    """Extra context from the client (AG-UI `Context`): shown to the model as untrusted data."""

    model_config = ConfigDict(extra="forbid")

    description: ClientText = Field(max_length=200)
    value: ClientText = Field(max_length=2_000)


class RunRequest(BaseModel):
    """Body of `POST /v1/sessions/{id}/runs`."""

    model_config = ConfigDict(extra="forbid")

    message: ClientText = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="The user's message.")
    message_id: ClientText | None = Field(
        default=None, min_length=1, max_length=200, description="Client id for the message; generated if absent."
    )
    context: list[ContextItem] = Field(default_factory=list, max_length=MAX_CONTEXT_ITEMS)


class RunInput(BaseModel):
    """A run, independent of the endpoint: messages to store first (the last is the user's turn)."""

    new_messages: list[ChatMessage] = Field(min_length=1)
    context: list[ContextItem] = Field(default_factory=list)
    run_id: UUID | None = Field(default=None, description="The client's run id (AG-UI runId), when it is a UUID.")


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

    id: UUID
    status: Literal["running", "completed", "failed", "cancelled"] = Field(
        description="The run's status when the cancel was recorded: `running` while it is being stopped "
        "(it then ends with RUN_FINISHED outcome `cancelled`); anything else: it had ended, nothing changed."
    )
