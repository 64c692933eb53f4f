"""What a run says happened, independent of any wire protocol.

The run (service, gateway, resume) emits these through `RunEvents` (engine/runs/events/emitter.py), which keeps
their order valid; one mapper (`agui/mapper.py`) turns each into AG-UI events. A new kind of event is one
model here and one case in the mapper.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agent_runtime.engine.conversation.chat_messages import ChatMessage


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunStarted(_Event):
    kind: Literal["run_started"] = "run_started"


class MessagesSnapshot(_Event):
    """The thread's visible messages, oldest first (what `GET /v1/sessions/{id}/messages` lists)."""

    kind: Literal["messages_snapshot"] = "messages_snapshot"
    messages: list[ChatMessage]


class StateSnapshot(_Event):
    kind: Literal["state_snapshot"] = "state_snapshot"
    state: dict[str, JsonValue]


class PatchOperation(_Event):
    """One RFC 6902 operation; the run state only ever replaces values it put there itself."""

    op: Literal["replace", "add", "remove"]
    path: str
    value: JsonValue = None


class StateDelta(_Event):
    kind: Literal["state_delta"] = "state_delta"
    operations: list[PatchOperation] = Field(min_length=1)


class StageStarted(_Event):
    kind: Literal["stage_started"] = "stage_started"
    stage: str


class StageFinished(_Event):
    kind: Literal["stage_finished"] = "stage_finished"
    stage: str


class TextStarted(_Event):
    kind: Literal["text_started"] = "text_started"
    message_id: str


class TextDelta(_Event):
    kind: Literal["text_delta"] = "text_delta"
    message_id: str
    text: str = Field(min_length=1)


class TextEnded(_Event):
    kind: Literal["text_ended"] = "text_ended"
    message_id: str


class ReasoningStarted(_Event):
    kind: Literal["reasoning_started"] = "reasoning_started"
    message_id: str


class ReasoningDelta(_Event):
    kind: Literal["reasoning_delta"] = "reasoning_delta"
    message_id: str
    text: str = Field(min_length=1)


class ReasoningEnded(_Event):
    kind: Literal["reasoning_ended"] = "reasoning_ended"
    message_id: str


class ToolCallRequested(_Event):
    """The model asked for a tool call (stored as a visible row first; `parent_message_id` is that row)."""

    kind: Literal["tool_call_requested"] = "tool_call_requested"
    tool_call_id: str
    name: str
    arguments: str
    parent_message_id: str | None


class ToolResultReady(_Event):
    kind: Literal["tool_result_ready"] = "tool_result_ready"
    message_id: str
    tool_call_id: str
    content: str


class Notice(_Event):
    """Out-of-band information for the client (AG-UI CUSTOM events; every name: docs/api.md, "A run's event stream")."""

    kind: Literal["notice"] = "notice"
    name: Literal["run_cost", "input_ignored", "run_resumed"]
    value: dict[str, JsonValue]


class ModelUsage(_Event):
    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int | None


class PendingInterrupt(_Event):
    """A tool call waiting for the user's approval (AG-UI `Interrupt`, reason `tool_approval`)."""

    id: str
    tool_call_id: str
    tool_name: str
    arguments: str = Field(description="The arguments as the model wrote them (JSON text).")
    arguments_schema: dict[str, JsonValue] = Field(description="JSON schema the (edited) arguments must match.")


class RunFinished(_Event):
    """The run ended without failing: completed, cancelled by the user, or waiting for approvals / the
    client's tool results."""

    kind: Literal["run_finished"] = "run_finished"
    usage: list[ModelUsage] = Field(default_factory=list)
    cancelled: bool = False
    pending_tool_call_ids: list[str] = Field(default_factory=list, description="Frontend tool calls to answer.")
    interrupts: list[PendingInterrupt] = Field(default_factory=list)


class RunFailed(_Event):
    kind: Literal["run_failed"] = "run_failed"
    code: str
    message: str


RunEvent = Annotated[
    RunStarted
    | MessagesSnapshot
    | StateSnapshot
    | StateDelta
    | StageStarted
    | StageFinished
    | TextStarted
    | TextDelta
    | TextEnded
    | ReasoningStarted
    | ReasoningDelta
    | ReasoningEnded
    | ToolCallRequested
    | ToolResultReady
    | Notice
    | RunFinished
    | RunFailed,
    Field(discriminator="kind"),
]
