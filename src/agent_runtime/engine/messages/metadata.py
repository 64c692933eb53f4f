"""Typed `agent_chat_messages.metadata`: a discriminated union validated before every insert."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent_runtime.engine.billing.models import CostSource


class _Meta(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallSpec(_Meta):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str = Field(description="JSON-encoded arguments exactly as the model produced them.")


class UserInputMetadata(_Meta):
    kind: Literal["user_input"] = "user_input"
    run_id: str | None = None


class SystemMetadata(_Meta):
    """A system message kept in chat memory (not part of the seed's four kinds, see engine/memory)."""

    kind: Literal["system"] = "system"


class ToolCallMetadata(_Meta):
    kind: Literal["tool_call"] = "tool_call"
    tool_calls: list[ToolCallSpec] = Field(min_length=1)
    run_id: str | None = None
    stage: str | None = None
    model: str | None = None
    cost_source: CostSource | None = None
    cached_tokens: int | None = None


class ToolResultMetadata(_Meta):
    kind: Literal["tool_result"] = "tool_result"
    tool_call_id: str = Field(min_length=1)
    tool_name: str | None = None
    is_error: bool = False
    run_id: str | None = None


class AssistantOutputMetadata(_Meta):
    kind: Literal["assistant_output"] = "assistant_output"
    run_id: str | None = None
    stage: str | None = None
    model: str | None = None
    cost_source: CostSource | None = None
    cached_tokens: int | None = None
    demo: bool = False
    message_id: str | None = Field(default=None, description="AG-UI message id of the streamed answer.")
    # Present only on the answer of a cancelled run: its text as far as it was streamed.
    partial: Literal[True] | None = None


class AuditMetadata(_Meta):
    kind: Literal["audit"] = "audit"
    stage: str
    run_id: str | None = None
    model: str | None = None
    cost_source: CostSource | None = None
    cached_tokens: int | None = None
    raw_output: Any = None
    error: str | None = None
    # Set on the row holding a model call's reasoning (deepseek-reasoner's reasoning_content): kept for audit,
    # streamed as REASONING_* events, never sent back to the model.
    reasoning: Literal[True] | None = None


MessageMetadata = Annotated[
    UserInputMetadata
    | SystemMetadata
    | ToolCallMetadata
    | ToolResultMetadata
    | AssistantOutputMetadata
    | AuditMetadata,
    Field(discriminator="kind"),
]

METADATA_ADAPTER: TypeAdapter[MessageMetadata] = TypeAdapter(MessageMetadata)
