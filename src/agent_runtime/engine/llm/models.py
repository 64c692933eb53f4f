"""Request, response and stream-event shapes of the one LLM entry point (OpenAI chat format on the wire)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.billing.models import CostBreakdown, LLMUsage


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WireFunctionCall(_Wire):
    name: str
    arguments: str = Field(description="JSON-encoded arguments exactly as the model produced them.")


class WireToolCall(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: WireFunctionCall


class WireMessage(_Wire):
    """One chat message as OpenAI-compatible providers take it."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    name: str | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None
    images: list[str] | None = Field(
        default=None,
        description="A user message's images (data: or https URLs): sent as `image_url` parts after its text "
        "(call_builder), only to LLM_IMAGE_MODELS (llm/vision.py).",
    )
    reasoning_content: str | None = Field(
        default=None,
        description="An assistant message's reasoning: a thinking model (DeepSeek) wants it back in every later "
        "request of the thread that carries tools.",
    )


class FunctionSpec(_Wire):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments object.",
    )
    strict: bool | None = None


class ToolSchema(_Wire):
    """An OpenAI function tool offered to the model."""

    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedFunction(_Wire):
    name: str


class NamedToolChoice(_Wire):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class LLMRequest(_Wire):
    model: str | None = Field(default=None, description="LiteLLM model id; None means the configured model.")
    messages: list[WireMessage] = Field(min_length=1)
    tools: list[ToolSchema] | None = None
    tool_choice: ToolChoice | None = None
    json_mode: bool = Field(default=False, description='Sends response_format {"type": "json_object"}.')
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool = Field(default=False, description="`complete()` streams internally when set.")
    thinking: bool | None = Field(default=None, description="Thinking mode on or off; None: the provider's default.")
    reasoning_effort: Literal["low", "high", "max"] | None = Field(default=None, description="With thinking on.")
    end_user: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Opaque, stable id of the end user (a keyed hash, never the raw id): DeepSeek's `user_id`, "
        "which isolates its KV cache, content safety and scheduling per user.",
    )


@runtime_checkable
class BeforeSend(Protocol):
    """A run's budget hold (engine/runs/ledger/reservation.py): awaited before a request is sent, it returns the
    request to send (its `max_tokens` bounded when the budget has room for no more) or refuses by raising; told
    what each call that came back cost."""

    async def __call__(self, request: LLMRequest) -> LLMRequest: ...

    def ended(self, request: LLMRequest, cost: Decimal) -> None: ...

    def streamed(self, request: LLMRequest, text: str) -> None:
        """`request`'s answer streamed `text` (content or reasoning): output the provider bills even if it is cut."""


class CallOptions(_Wire):
    """How one task's model calls are made (config/crewai/tasks.yaml, resolved against the settings)."""

    model: str = Field(description="LiteLLM model id.")
    thinking: bool
    reasoning_effort: Literal["low", "high", "max"] | None = None


class LLMToolCall(_Wire):
    id: str
    name: str
    arguments: str = Field(description="JSON-encoded arguments exactly as the model produced them.")


class LLMResponse(_Wire):
    model: str = Field(description="The LiteLLM model id that answered (a fallback's, after a fallback).")
    content: str
    tool_calls: list[LLMToolCall] = Field(default_factory=list)
    usage: LLMUsage | None
    cost: CostBreakdown
    finish_reason: str | None
    is_demo: bool = False
    reasoning: str | None = Field(
        default=None,
        description="The model's reasoning (`reasoning_content`); sent back with the message it gave (WireMessage).",
    )
    fallback_from: str | None = Field(
        default=None, description="The model that was asked first, when `model` answered as its fallback."
    )


class UnfinishedCall(_Wire):
    """A call cut after the provider began to answer (cancel, dropped stream, timeout): no usage came back, but
    the provider bills it. `cost` is estimated (prompt counted locally, output as far as it streamed)."""

    model: str
    reason: str = Field(description="`cancelled`, or the error code of the fault that cut it.")
    cost: CostBreakdown


__all__ = [
    "CallOptions",
    "FunctionSpec",
    "LLMRequest",
    "LLMResponse",
    "LLMToolCall",
    "LLMUsage",
    "NamedFunction",
    "NamedToolChoice",
    "ToolChoice",
    "ToolSchema",
    "UnfinishedCall",
    "WireFunctionCall",
    "WireMessage",
    "WireToolCall",
]
