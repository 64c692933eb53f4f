"""The stored run event log (`agent_run_events`) and the run controls that travel over LISTEN/NOTIFY (the
channels and the statements are in `repository.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.runs.events.log import EventBatch, LoggedEvent
from agent_runtime.engine.runs.events.repository import APPEND_SQL, CANCEL_SQL, PAGE_SQL


class RunLogState(BaseModel):
    status: Literal["running", "completed", "failed", "cancelled"]
    log_complete: bool
    events_expired: bool


@dataclass(frozen=True, slots=True)
class RunLogPage:
    state: RunLogState
    events: list[LoggedEvent]


class EventStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def append(self, batch: EventBatch) -> None:
        events = batch.events
        await self._pool.execute(
            APPEND_SQL,
            batch.run_id,
            batch.user_id,
            [e.seq for e in events],
            [e.data for e in events],
            [e.terminal for e in events],
            events[-1].terminal,
            batch.notify,
        )

    async def page(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, *, after: int, limit: int, ask_live: bool = False
    ) -> RunLogPage | None:
        """The run's state and up to `limit` events after seq `after`; None if it is not the caller's run.
        `ask_live`: if the run still runs, ask its process (over NOTIFY) to write its events as they come."""
        rows = await self._pool.fetch(PAGE_SQL, run_id, session_id, ctx.user_id, after, limit, ask_live)
        if not rows:
            return None
        state = RunLogState.model_validate(dict(rows[0]))
        events = [
            LoggedEvent(seq=r["seq"], data=r["data"], terminal=r["terminal"]) for r in rows if r["seq"] is not None
        ]
        return RunLogPage(state=state, events=events)

    async def request_cancel(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> str | None:
        """Mark the run's cancel (if it still runs) and tell its process; its status, or None if not the caller's."""
        row = await self._pool.fetchrow(CANCEL_SQL, run_id, session_id, ctx.user_id)
        return None if row is None else str(row["status"])
