"""The agent's ports: one model call in, one reply out (`CallModel`), and the tool results a stage hands to the run
(`EventSink`). The run service implements them (its gateway: streaming, events, billing); the stages only call them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.errors import UpstreamError
from agent_runtime.engine.flow.contracts import IntentResult
from agent_runtime.engine.llm.models import ToolSchema


class ModelCall(BaseModel):
    """One request to our LLM layer."""

    # Chat-completions message dicts, sent on as they are (engine/llm/models.py `WireMessage` validates each): the
    # stage builds them in the exact shape earlier requests had (engine/flow/wire.py), for the provider's cache.
    messages: list[dict[str, Any]]
    tools: list[ToolSchema] | None = Field(default=None, description="The tools the stage offers.")
    json_mode: bool = Field(default=False, description='Send response_format {"type": "json_object"}.')
    stage: str
    route: str | None = Field(
        default=None, description="The turn's route, once the call's stage implies one (the run state shows it)."
    )
    streams_answer: bool = Field(default=False, description="The reply's assistant_text is the turn's answer: stream.")
    answer_route: str | None = Field(
        default=None, description="Stream the answer only when the reply takes this route (None: any)."
    )
    attempt: int = Field(default=0, ge=0, description="0 for the first try, n for the n-th JSON repair.")
    max_tokens: int | None = Field(default=None, ge=1, description="The stage's output-token cap (its YAML task).")
    allow_tools: bool = Field(
        default=True,
        description="False: the model must answer without calling a tool (a repair of a stage's answer); `tools` "
        "still lists the stage's tools, to be sent with tool_choice 'none' or left out. Tool calls in the reply of "
        "such a call are never run: the stage rejects that answer.",
    )


class ModelReply(BaseModel):
    content: str | None = None
    # The stored tool_call row's shape: id, name and the arguments JSON text exactly as the model produced it.
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    finish_reason: str | None = Field(
        default=None, description="The provider's finish_reason; 'length': the answer was cut at max_tokens."
    )
    reasoning: str | None = Field(
        default=None,
        description="The provider's reasoning_content (thinking mode), '' when it sent the field empty. The stage "
        "sends it back with this reply in its later calls (DeepSeek answers 400 without it).",
    )


CallModel = Callable[[ModelCall], Awaitable[ModelReply]]


class StageToolResult(BaseModel):
    """A tool's result under the id of the tool call the model made in this run (engine/flow/stage_tools.py).

    The only event a stage reports: the run emits the tool calls themselves from the model's reply, right after the
    row that holds them is stored (`RunGateway`)."""

    stage: str
    call_id: str
    name: str
    content: str = Field(description='JSON text as the model gets it; a failure is {"error": "..."}.')
    is_error: bool
    cancelled: bool = Field(default=False, description="The run was stopped and the tool cut before it finished.")


# Called on the event-loop thread; it must not block (enqueue and return).
EventSink = Callable[[StageToolResult], None]


class IntentDecided(BaseModel):
    """A turn's intent, decided, on its way to the execution stage: what that stage needs to be resumed without the
    intent call (by a run after approvals, or by another process taking the run over)."""

    user_input: str = Field(description="The execution stage's request text, so a resumed stage sends it again.")
    intent: IntentResult
    intent_answer: str | None = Field(
        default=None, description="The intent answer as the model wrote it (None in turns stored before it was kept)."
    )
    intent_reasoning: str | None = Field(default=None, description="The intent answer's reasoning (thinking mode).")


# Awaited before the execution stage's first call: the run stores the decision (engine/runs/takeover/).
IntentSink = Callable[[IntentDecided], Awaitable[None]]


class StageOutputError(UpstreamError):
    """The model kept answering a stage with output that does not validate against its contract."""

    code = "invalid_model_output"


class ToolCallsPending(Exception):  # a stop, not an error: the run ends waiting for someone
    """A model reply asked for tools the run may not run by itself (approval or frontend tools).

    Raised by the run's `call_model` once the reply's tool-call row is stored and streamed; it ends the
    stage and the flow, and the run finishes waiting (the next run continues the stage).
    """

    def __init__(self, stage: str, calls: list[ToolCallSpec]) -> None:
        super().__init__(f"stage {stage!r} waits for tool calls: {', '.join(c.name for c in calls)}")
        self.stage = stage
        self.calls = calls
