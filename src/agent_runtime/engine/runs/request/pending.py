"""What a suspended turn waits for, stored on the session (`pending_turn`), and the client's AG-UI state.

A run suspends when the model asks for a tool that needs the user's approval (an AG-UI interrupt) or for a
frontend tool (the client runs it). The tool-call row is stored and streamed as usual; the session then
records the turn: every call of that model reply, what kind it is, and what the execution stage needs to
go on (its request text and the intent stage's result). Any process can serve the next run from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import session_not_found
from agent_runtime.engine.flow.model_call import IntentDecided
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runs.events.types import PendingInterrupt
from agent_runtime.engine.runs.request.repository import AGUI_STATE_SQL
from agent_runtime.engine.sessions.models import approval_interrupt_id

CallKind = Literal["approval", "frontend", "server"]


class PendingCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(description="The model's tool call id (the stored tool_call row's id).")
    name: str
    arguments: str
    kind: CallKind = Field(description="approval: waits for the user; frontend: the client runs it; server: ours.")

    @property
    def interrupt_id(self) -> str:
        return approval_interrupt_id(self.id)


class PendingTurn(IntentDecided):
    """A turn whose execution stage stopped at a model reply asking for tools it may not run by itself."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="New for every suspension; a run that read another one lost a race.")
    run_id: str = Field(description="The run that suspended.")
    calls: list[PendingCall] = Field(min_length=1)

    def decided(self) -> IntentDecided:
        return IntentDecided.model_validate(self.model_dump(include=set(IntentDecided.model_fields)))

    def of_kind(self, kind: CallKind) -> list[PendingCall]:
        return [call for call in self.calls if call.kind == kind]


def approval_interrupts(turn: PendingTurn, tools: Mapping[str, Tool[Any]]) -> list[PendingInterrupt]:
    """The interrupts of a waiting turn: what its run's RUN_FINISHED carried, and what a hydrate sends again."""
    return [
        PendingInterrupt(
            id=call.interrupt_id,
            tool_call_id=call.id,
            tool_name=call.name,
            arguments=call.arguments,
            arguments_schema=tools[call.name].openai_schema().function.parameters,
        )
        for call in turn.of_kind("approval")
    ]


def frontend_call_ids(turn: PendingTurn) -> list[str]:
    return [call.id for call in turn.of_kind("frontend")]


class SessionAguiState(BaseModel):
    pending: PendingTurn | None
    client_state: dict[str, JsonValue] | None
    stored_ids: set[str] = Field(description="Of the message ids asked about, those the session holds.")
    last_user_id: str | None = Field(default=None, description="The thread's last user message (None: none yet).")
    last_run_id: UUID | None = Field(default=None, description="The session's latest run (None: it never ran).")
    last_run_status: str | None = Field(default=None, description="That run's status (`agent_runs.status`).")
    running: bool = Field(default=False, description="The latest run is running (its lease may have expired).")

    @property
    def live_run_id(self) -> UUID | None:
        return self.last_run_id if self.running else None


class PendingStore:
    """Reads what a session waits for; the run's start takes it and the run's end leaves a new one, each in
    the run's own statement (`RunStore.start` / `finish`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def load(self, ctx: RequestContext, session_id: UUID, message_ids: Sequence[str] = ()) -> SessionAguiState:
        """The caller's session's pending turn, client state, and which of `message_ids` it stores, in one
        read; 404 for a session that is not the caller's (missing or someone else's: the same answer)."""
        ids = list(message_ids)
        row = await self._pool.read(lambda conn: conn.fetchrow(AGUI_STATE_SQL, session_id, ctx.user_id, ids))
        if row is None:
            raise session_not_found(session_id)
        pending = row["pending_turn"]
        return SessionAguiState(
            pending=PendingTurn.model_validate(pending) if pending is not None else None,
            client_state=row["client_state"],
            stored_ids=set(row["stored_ids"]),
            last_user_id=row["last_user_id"],
            last_run_id=row["run_id"],
            last_run_status=row["run_status"],
            running=row["running"],
        )
