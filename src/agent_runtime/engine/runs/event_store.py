"""The stored run event log (`agent_run_events`) and the run controls that travel over LISTEN/NOTIFY.

Channels: `agent_run_events` (payload: run id) wakes the followers of a run when its events are written;
`agent_run_control` (payload `follow:<run id>` or `cancel:<run id>`) asks the process that runs it to write
its events as they come, or to stop it. NOTIFY is only the wake-up: the log and `agent_runs` are the truth.
"""

from __future__ import annotations

from typing import Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.runs.event_log import EventBatch, LoggedEvent

EVENTS_CHANNEL = "agent_run_events"
CONTROL_CHANNEL = "agent_run_control"
# The seq of a terminal event the sweep writes for a run whose process died: after anything that process
# may have streamed to its client without storing it.
LOST_RUN_SEQ = 2_147_483_647

# A terminal batch first marks the log complete, on the run row's latest version: if the sweep ended the
# log meanwhile (the run was lost), nothing is added after its terminal event.
_APPEND_SQL = f"""
WITH open_run AS (
    SELECT 1 FROM agent_runs WHERE id = $1 AND user_id = $2 AND NOT log_complete
), closed AS (
    UPDATE agent_runs SET log_complete = true WHERE id = $1 AND user_id = $2 AND $6 AND NOT log_complete
    RETURNING 1
), ins AS (
    INSERT INTO agent_run_events (run_id, seq, user_id, data, terminal)
    SELECT $1, e.seq, $2, e.data, e.terminal FROM unnest($3::int[], $4::text[], $5::bool[]) AS e(seq, data, terminal)
     WHERE CASE WHEN $6 THEN EXISTS (SELECT 1 FROM closed) ELSE EXISTS (SELECT 1 FROM open_run) END
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT pg_notify('{EVENTS_CHANNEL}', $1::text) WHERE $7
"""

_READ_SQL = """
SELECT seq, data, terminal FROM agent_run_events
 WHERE run_id = $1 AND user_id = $2 AND seq > $3 ORDER BY seq LIMIT $4
"""

_RUN_SQL = """
SELECT status, log_complete, events_expired FROM agent_runs WHERE id = $1 AND session_id = $2 AND user_id = $3
"""

_CANCEL_SQL = f"""
UPDATE agent_runs
   SET cancel_requested_at = CASE WHEN status = 'running' THEN COALESCE(cancel_requested_at, now()) END
 WHERE id = $1 AND session_id = $2 AND user_id = $3
RETURNING status, pg_notify('{CONTROL_CHANNEL}', 'cancel:' || id::text) IS NULL AS notified
"""

_FOLLOW_SQL = f"SELECT pg_notify('{CONTROL_CHANNEL}', 'follow:' || $1::text)"


class RunLogState(BaseModel):
    status: Literal["running", "completed", "failed", "cancelled"]
    log_complete: bool
    events_expired: bool


class EventStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def append(self, batch: EventBatch) -> None:
        events = batch.events
        await self._pool.execute(
            _APPEND_SQL,
            batch.run_id,
            batch.user_id,
            [e.seq for e in events],
            [e.data for e in events],
            [e.terminal for e in events],
            events[-1].terminal,
            batch.notify,
        )

    async def read(self, ctx: RequestContext, run_id: UUID, *, after: int, limit: int) -> list[LoggedEvent]:
        rows = await self._pool.fetch(_READ_SQL, run_id, ctx.user_id, after, limit)
        return [LoggedEvent(seq=r["seq"], data=r["data"], terminal=r["terminal"]) for r in rows]

    async def run_state(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> RunLogState | None:
        row = await self._pool.fetchrow(_RUN_SQL, run_id, session_id, ctx.user_id)
        return None if row is None else RunLogState.model_validate(dict(row))

    async def request_cancel(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> str | None:
        """Mark the run's cancel (if it still runs) and tell its process; its status, or None if not the caller's."""
        row = await self._pool.fetchrow(_CANCEL_SQL, run_id, session_id, ctx.user_id)
        return None if row is None else str(row["status"])

    async def request_live(self, run_id: UUID) -> None:
        """Ask the process running `run_id` to write its events as they come (a follower is watching)."""
        await self._pool.execute(_FOLLOW_SQL, str(run_id))
