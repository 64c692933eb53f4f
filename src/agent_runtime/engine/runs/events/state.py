"""The run's AG-UI state: a STATE_SNAPSHOT when the run starts, then STATE_DELTA patches as it moves.

The agent state the client holds is its own data (what it sent as `RunAgentInput.state`, stored on the
session as data and never shown to the model) plus one key the server owns, `agentRuntime`:

    {"runId": "...", "status": "running" | "completed" | "interrupted" | "cancelled" | "failed",
     "stage": "intent" | "execution" | "organization" | null,
     "route": "DIRECT_EXECUTION" | "NEEDS_EXECUTION" | null,
     "pendingToolCallIds": [...], "interrupts": [...interrupt ids]}

Every field is in the snapshot from the start, so each delta is a `replace` of a path that exists: the
client applies it with validation on and never warns. A client's own copy of `agentRuntime` is dropped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.events.types import PatchOperation

RUN_STATE_KEY = "agentRuntime"
RunStatus = Literal["running", "completed", "interrupted", "cancelled", "failed"]


class RunState(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    run_id: str
    status: RunStatus = "running"
    stage: str | None = None
    route: str | None = None
    pending_tool_call_ids: list[str] = Field(default_factory=list)
    interrupts: list[str] = Field(default_factory=list)

    def wire(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json", by_alias=True)


class RunStateTracker:
    """Holds the run state and emits what changed; `update` takes field names (snake_case)."""

    def __init__(self, events: RunEvents, run_id: str) -> None:
        self._events = events
        self.state = RunState(run_id=run_id)

    def snapshot(self, client_state: dict[str, JsonValue] | None) -> None:
        self._events.state_snapshot({**(client_state or {}), RUN_STATE_KEY: self.state.wire()})

    def update(self, **changes: JsonValue) -> None:
        before = self.state.wire()
        self.state = self.state.model_copy(update=changes)
        after = self.state.wire()
        self._events.state_delta(
            [
                PatchOperation(op="replace", path=f"/{RUN_STATE_KEY}/{key}", value=value)
                for key, value in after.items()
                if before[key] != value
            ]
        )
