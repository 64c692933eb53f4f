"""Typed `agent_chat_messages.metadata`: a discriminated union validated before every insert."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from agent_runtime.engine.billing.models import CostBreakdown, CostSource, PriceTier


class _Meta(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallSpec(_Meta):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str = Field(description="JSON-encoded arguments exactly as the model produced them.")


class ImageAttachment(_Meta):
    """An image of a user message, kept on its row: inline bytes (base64, checked against `mime_type` by their
    magic bytes at intake) or an https URL the provider fetches itself (the server never fetches it)."""

    id: str = Field(min_length=1, max_length=64, description="The server's id of the image (its URL names it).")
    mime_type: Literal["image/jpeg", "image/png", "image/webp"] | None = Field(
        default=None, description="Always set for inline data; a URL's type may be unknown (the provider sniffs it)."
    )
    data: str | None = Field(default=None, description="Base64 of the image's bytes (no data: prefix).")
    url: str | None = Field(default=None, max_length=2048, description="An https URL, passed to the provider.")
    size: int | None = Field(default=None, ge=0, description="Bytes of inline data.")

    def wire_url(self) -> str:
        """What the provider's `image_url.url` takes: a data URL for inline bytes, else the client's URL."""
        return f"data:{self.mime_type};base64,{self.data}" if self.data is not None else str(self.url)


class UserInputMetadata(_Meta):
    kind: Literal["user_input"] = "user_input"
    run_id: str | None = None
    # Left out when None: text-only rows (and those stored before images existed) keep their exact shape.
    images: list[ImageAttachment] | None = None

    @model_serializer(mode="wrap")
    def _without_no_images(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("images") is None:
            data.pop("images", None)
        return data


class SystemMetadata(_Meta):
    """A system message kept in chat memory (not part of the seed's four kinds, see engine/conversation)."""

    kind: Literal["system"] = "system"


class BillingFields(_Meta):
    """How a billed row's model call was priced, so every stored cost can be recomputed (billing.recompute_cost):
    `model` (on the row's metadata) names the price list's model, `price_effective_from` its entry in force when
    the call started, `price_tier` which of its tiers. None on rows that carry no call."""

    cost_source: CostSource | None = None
    cached_tokens: int | None = None
    price_tier: PriceTier | None = None
    price_effective_from: AwareDatetime | None = None

    @classmethod
    def of(cls, cost: CostBreakdown) -> BillingFields:
        return cls(
            cost_source=cost.cost_source,
            cached_tokens=cost.cache_hit_tokens,
            price_tier=cost.price_tier,
            price_effective_from=cost.price_effective_from,
        )


class ToolCallMetadata(BillingFields):
    kind: Literal["tool_call"] = "tool_call"
    tool_calls: list[ToolCallSpec] = Field(min_length=1)
    run_id: str | None = None
    stage: str | None = None
    model: str | None = None
    # The model's reasoning for these calls (thinking mode): sent back with them in every later request.
    reasoning_content: str | None = None


class ToolResultMetadata(_Meta):
    kind: Literal["tool_result"] = "tool_result"
    tool_call_id: str = Field(min_length=1)
    tool_name: str | None = None
    is_error: bool = False
    run_id: str | None = None
    # Present only on the result of a tool cut by a stopped run (engine/flow/stage_tools.py).
    cancelled: Literal[True] | None = None


class AssistantOutputMetadata(BillingFields):
    kind: Literal["assistant_output"] = "assistant_output"
    run_id: str | None = None
    stage: str | None = None
    model: str | None = None
    demo: bool = False
    message_id: str | None = Field(default=None, description="AG-UI message id of the streamed answer.")
    # Present only on the answer of a cancelled run: its text as far as it was streamed.
    partial: Literal[True] | None = None
    # The reasoning of the call that gave this answer (thinking mode): sent back with it in later requests.
    reasoning_content: str | None = None


class AuditMetadata(BillingFields):
    kind: Literal["audit"] = "audit"
    stage: str
    run_id: str | None = None
    model: str | None = None
    # A call cut by a cancel or a fault: its usage is estimated (prompt counted locally, output as streamed).
    estimated: Literal[True] | None = None
    raw_output: Any = None
    error: str | None = None
    # Set on the row holding a model call's reasoning (`reasoning_content`): kept for audit and streamed as
    # REASONING_* events; it is also on the row of the calls or the answer it gave, to be sent back.
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
