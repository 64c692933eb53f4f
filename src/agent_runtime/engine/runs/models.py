"""What a run takes in."""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

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
