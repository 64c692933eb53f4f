"""Stored chat messages: what goes in (NewMessage) and what comes out (StoredMessage)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from agent_runtime.engine.conversation.metadata import AuditMetadata, BillingFields, MessageMetadata
from agent_runtime.engine.llm.models import UnfinishedCall
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


def image_path(session_id: UUID | str, image_id: str) -> str:
    """Where the API serves an inline image of a session (GET, the session owner's token only)."""
    return f"/v1/sessions/{session_id}/images/{image_id}"


class ImageSource(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    type: Literal["url"] = "url"
    value: str = Field(description="The client's https URL, or the path of the endpoint serving the inline image.")
    mime_type: str | None = Field(default=None, alias="mimeType", serialization_alias="mimeType")


class ContentPart(BaseModel):
    """A user message's content as AG-UI 1.0 InputContent parts (text, then images), as MESSAGES_SNAPSHOT shows it."""

    type: Literal["text", "image"]
    text: str | None = None
    id: str | None = None
    source: ImageSource | None = None


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
    content_parts: list[ContentPart] | None = Field(
        default=None,
        description="A user message with images: its text and images as AG-UI parts; the images' bytes are not in "
        "`metadata` (served by `GET /v1/sessions/{id}/images/{image_id}`).",
    )

    @model_serializer(mode="wrap")
    def _without_no_parts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only messages with images have parts: every other row keeps its shape.
        data: dict[str, Any] = handler(self)
        if data.get("content_parts") is None:
            data.pop("content_parts", None)
        return data

    def for_client(self) -> StoredMessage:
        """The message as the API lists it: inline image bytes replaced by the URL that serves them."""
        images = getattr(self.metadata, "images", None)
        if not images:
            return self
        parts = [ContentPart(type="text", text=self.content)] if self.content else []
        for image in images:
            value = image.url if image.data is None else image_path(self.session_id, image.id)
            parts.append(
                ContentPart(type="image", id=image.id, source=ImageSource(value=value, mime_type=image.mime_type))
            )
        metadata = self.metadata.model_copy(update={"images": [i.model_copy(update={"data": None}) for i in images]})
        return self.model_copy(update={"metadata": metadata, "content_parts": parts})


class StoredImage(BaseModel):
    """An inline image of a stored user message, as `GET /v1/sessions/{id}/images/{image_id}` serves it."""

    mime_type: str
    data: bytes
