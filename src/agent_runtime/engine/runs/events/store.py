"""The stored run event log (`agent_run_events`) and the run controls that travel over LISTEN/NOTIFY.

Channels: `agent_run_events` (payload: run id) wakes the followers of a run when its events are written;
`agent_run_control` (payload `follow:<run id>` or `cancel:<run id>`) asks the process that runs it to write
its events as they come, or to stop it. NOTIFY is only the wake-up: the log and `agent_runs` are the truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.runs.events.log import EventBatch, LoggedEvent

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

# One round trip per read of a follower: the run's state and the next page of its log, in one snapshot (so "the
# log is complete and has nothing after `position`" is never a race between two reads), plus, when asked and the
# run still runs, the NOTIFY that makes the process running it write its events as they come. `$5` = 0 reads
# the state only. The NOTIFY is in an uncorrelated subquery: evaluated once, not per event row.
_PAGE_SQL = f"""
WITH run AS (
    SELECT status, log_complete, events_expired FROM agent_runs WHERE id = $1 AND session_id = $2 AND user_id = $3
), asked AS (
    SELECT pg_notify('{CONTROL_CHANNEL}', 'follow:' || $1::text) FROM run WHERE $6 AND status = 'running'
)
SELECT run.status, run.log_complete, run.events_expired, (SELECT count(*) FROM asked) AS asked,
       e.seq, e.data, e.terminal
  FROM run
  LEFT JOIN LATERAL (
      SELECT seq, data, terminal FROM agent_run_events
       WHERE run_id = $1 AND user_id = $3 AND seq > $4 ORDER BY seq LIMIT $5
  ) e ON true
 ORDER BY e.seq
"""

_CANCEL_SQL = f"""
UPDATE agent_runs
   SET cancel_requested_at = CASE WHEN status = 'running' THEN COALESCE(cancel_requested_at, now()) END
 WHERE id = $1 AND session_id = $2 AND user_id = $3
RETURNING status, pg_notify('{CONTROL_CHANNEL}', 'cancel:' || id::text) IS NULL AS notified
"""


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
            _APPEND_SQL,
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
        rows = await self._pool.fetch(_PAGE_SQL, run_id, session_id, ctx.user_id, after, limit, ask_live)
        if not rows:
            return None
        state = RunLogState.model_validate(dict(rows[0]))
        events = [
            LoggedEvent(seq=r["seq"], data=r["data"], terminal=r["terminal"]) for r in rows if r["seq"] is not None
        ]
        return RunLogPage(state=state, events=events)

    async def request_cancel(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> str | None:
        """Mark the run's cancel (if it still runs) and tell its process; its status, or None if not the caller's."""
        row = await self._pool.fetchrow(_CANCEL_SQL, run_id, session_id, ctx.user_id)
        return None if row is None else str(row["status"])
