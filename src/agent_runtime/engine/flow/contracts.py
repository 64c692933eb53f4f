"""Validated output contracts of the three flow stages (seed: runtime-design-v2).

The class names are part of the contract: their JSON schema titles ("IntentResult", ...) are how the
offline demo model recognises which stage it is answering. Field descriptions end up in the schema the
model is shown, so they are written as instructions to the model.

Field order matters too: the runner streams `assistant_text` out of the partial JSON while the model is
still generating it, and models emit keys in schema order, so `assistant_text` comes as early as possible
(right after `route`, which the runner needs first to know whether the text is the final answer).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

StageName = Literal["intent", "execution", "organization"]
STAGE_NAMES: list[StageName] = ["intent", "execution", "organization"]


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


class IntentResult(BaseModel):
    route: Literal["DIRECT_EXECUTION", "NEEDS_EXECUTION"] = Field(
        description="DIRECT_EXECUTION if you can fully answer now without tools; otherwise NEEDS_EXECUTION."
    )
    assistant_text: str | None = Field(
        default=None,
        description="The complete reply to the user, in the user's language. Required for DIRECT_EXECUTION.",
    )
    intent_summary: str = Field(description="One sentence: what the user wants.")
    execution_brief: str | None = Field(
        default=None,
        description="Self-contained instructions for the execution stage. Required for NEEDS_EXECUTION.",
    )
    safety_flags: list[str] = Field(
        default_factory=list, description="Short labels for any safety concern in the request; empty if none."
    )

    @model_validator(mode="after")
    def _route_payload(self) -> IntentResult:
        if self.route == "DIRECT_EXECUTION" and _blank(self.assistant_text):
            raise ValueError("assistant_text is required for DIRECT_EXECUTION")
        if self.route == "NEEDS_EXECUTION" and _blank(self.execution_brief):
            raise ValueError("execution_brief is required for NEEDS_EXECUTION")
        return self


class ExecutionResult(BaseModel):
    status: Literal["SUCCESS", "PARTIAL", "FAILED"]
    execution_summary: str = Field(description="What was done and found, as facts.")
    # Any, not a typed model: this is whatever structured facts the model gathered from its tools (numbers,
    # times, lists), different for every request. No code reads keys out of it; it is stored for audit and
    # handed to the organization stage as JSON text.
    execution_data: dict[str, Any] = Field(
        default_factory=dict, description="Structured facts gathered (tool results), as a JSON object."
    )
    report_brief: str = Field(description="What the final reply to the user should say.")
    error_message: str | None = Field(default=None, description="Why execution failed. Required for FAILED.")

    @model_validator(mode="after")
    def _failure_has_reason(self) -> ExecutionResult:
        if self.status == "FAILED" and _blank(self.error_message):
            raise ValueError("error_message is required when status is FAILED")
        return self


class OrganizationResult(BaseModel):
    assistant_text: str = Field(min_length=1, description="The complete reply to the user, in the user's language.")
    # Any for the same reason as ExecutionResult.execution_data: free-form, opaque to the code, kept for audit.
    response_metadata: dict[str, Any] = Field(
        default_factory=dict, description="Optional extra facts about the reply, as a JSON object."
    )

    @model_validator(mode="after")
    def _text_not_blank(self) -> OrganizationResult:
        if _blank(self.assistant_text):
            raise ValueError("assistant_text must not be blank")
        return self


StageResult = IntentResult | ExecutionResult | OrganizationResult

STAGE_CONTRACTS: dict[StageName, type[StageResult]] = {
    "intent": IntentResult,
    "execution": ExecutionResult,
    "organization": OrganizationResult,
}

# The last line of every stage's request, the intent stage's (the user's turn) too: the contract the answer must match
# (engine/flow/prompt.py says why the intent call needs it and where it goes).
CONTRACT_LINE = "Answer as the {stage} stage: only the {contract} JSON object."
# Between the user's words and the intent stage's contract line (the separator of joined user turns).
INTENT_LINE_SEPARATOR = "\n\n"
INTENT_CONTRACT_LINE = CONTRACT_LINE.format(stage="intent", contract=IntentResult.__name__)


def intent_request(user_turn: str) -> str:
    """A user's turn as the intent stage's request: the turn's first call, and every later call's history, send it."""
    return user_turn + INTENT_LINE_SEPARATOR + INTENT_CONTRACT_LINE
