"""Stored chat messages: what goes in (NewMessage) and what comes out (StoredMessage)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.llm.models import UnfinishedCall
from agent_runtime.engine.messages.metadata import AuditMetadata, BillingFields, MessageMetadata
from agent_runtime.engine.money import Money

Role = Literal["user", "assistant", "system", "tool"]


class NewMessage(BaseModel):
    """A message to append. Visible (seq > 0) unless its metadata is an audit record (seq < 0)."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = ""
    metadata: MessageMetadata
    message_id: str = Field(default_factory=lambda: str(uuid4()), min_length=1, max_length=200)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost: Decimal = Field(default=Decimal(0), ge=0, max_digits=20, decimal_places=10)

    @property
    def is_audit(self) -> bool:
        return self.metadata.kind == "audit"


def unfinished_call_row(call: UnfinishedCall, *, stage: str, run_id: str | None) -> NewMessage:
    """The audit row of a call cut by a cancel or a fault (billed by the provider, no usage came back): its
    estimated usage and cost, so the ledger and the budgets count it."""
    cost = call.cost
    metadata = AuditMetadata(
        **BillingFields.of(cost).model_dump(),
        stage=stage,
        run_id=run_id,
        model=call.model,
        error=f"interrupted: {call.reason}",
        estimated=True,
    )
    return NewMessage(
        role="assistant",
        metadata=metadata,
        input_tokens=cost.input_tokens,
        output_tokens=cost.output_tokens,
        cost=cost.cost,
    )


class StoredMessage(BaseModel):
    id: UUID
    session_id: UUID
    message_id: str = Field(description="Public message id (the client's id for messages it sent).")
    seq: int = Field(description="Position: > 0 visible, < 0 backend audit.")
    role: Role
    content: str
    metadata: MessageMetadata
    input_tokens: int
    output_tokens: int
    cost: Money
    currency: str
    created_at: datetime
