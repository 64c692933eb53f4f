"""A run's life in the database: start, finish, lease renewal and the sweep; one statement each.

A full run used to issue 20 statements (11 of ours, the rest asyncpg's reset-on-release). Now the
start is one statement (session to `running` with its lease, the run row, the input messages, the
caller's profile), the finish is one (output rows, status, the run row and the run's totals), and the
pool no longer resets connections (`db/pool.py`): a full run with one tool call is 5 statements with
the window read and the two tool rows (docs/benchmarks.md).

Invariants stay in the database: the status machine and lease presence (checks and trigger on the
session row), one run per session (`status <> 'running'` in the start's WHERE), the per-user limit
(trigger `enforce_user_run_limit`), run ids unique (the `agent_runs` key).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, Field, JsonValue

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import session_not_found
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.messages.repository import INSERT_ROWS_SQL, incoming_rows_sql
from agent_runtime.engine.messages.store import MessageBatch, insert_messages
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.models import Profile
from agent_runtime.engine.profiles.repository import row_to_profile
from agent_runtime.engine.profiles.service import default_profile
from agent_runtime.engine.quotas import quota_error
from agent_runtime.engine.runs.events.store import EVENTS_CHANNEL, LOST_RUN_SEQ
from agent_runtime.engine.sessions.models import Session
from agent_runtime.engine.sessions.repository import SESSION_COLUMNS, row_to_session
from agent_runtime.engine.usage.models import UsageTotals
from agent_runtime.engine.usage.repository import SUMS, totals_of
from agent_runtime.engine.usage.service import run_totals
from agent_runtime.observability import metrics

log = logging.getLogger(__name__)


_START_SQL = f"""
WITH started AS (
    UPDATE agent_chat_sessions
       SET status = 'running', run_id = $3::uuid, run_started_at = now(), error_id = NULL, updated_at = now(),
           lease_owner = $4, lease_expires_at = now() + make_interval(secs => $5),
           next_seq = next_seq + $6, next_audit_seq = next_audit_seq - $7, title = COALESCE(title, $8),
           state_snapshot = state_snapshot || jsonb_build_object('status', 'running', 'run_id', $3::text,
                                                                 'error_id', NULL),
           pending_turn = NULL, client_state = COALESCE($19::jsonb, client_state)
     WHERE id = $1 AND user_id = $2 AND status <> 'running'
       -- The run was planned against this pending turn (engine/runs/request/pending.py), or none: it takes it.
       AND (pending_turn ->> 'id') IS NOT DISTINCT FROM $18::text
    RETURNING {SESSION_COLUMNS}, next_seq - $6 AS first_seq, next_audit_seq + $7 AS first_audit_seq, client_state
), run AS (
    INSERT INTO agent_runs (id, session_id, user_id) SELECT $3::uuid, id, $2 FROM started
), inserted AS (
    {INSERT_ROWS_SQL}
    FROM {incoming_rows_sql(9)} CROSS JOIN started c
)
SELECT s.*, (SELECT to_jsonb(p) FROM profiles p WHERE p.user_id = $2) AS profile FROM started s
"""

_FINISH_SQL = f"""
WITH c AS (
    UPDATE agent_chat_sessions
       SET status = $4::text, error_id = $5::text, updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
           next_seq = next_seq + $7, next_audit_seq = next_audit_seq - $8, pending_turn = $20::jsonb,
           state_snapshot = state_snapshot || jsonb_build_object('status', $4::text, 'run_id', $3::text,
                                                                 'error_id', $5::text)
     WHERE id = $1 AND user_id = $2 AND run_id = $3::uuid AND status = 'running'
    RETURNING next_seq - $7 AS first_seq, next_audit_seq + $8 AS first_audit_seq, billing_currency
), run AS (
    UPDATE agent_runs SET status = $19::text, error_code = $6::text, error_id = $5::text, finished_at = now()
     WHERE id = $3::uuid AND user_id = $2 AND status = 'running' AND EXISTS (SELECT 1 FROM c)
), ins AS (
    {INSERT_ROWS_SQL}
    FROM {incoming_rows_sql(10)} CROSS JOIN c
    RETURNING input_tokens, output_tokens, cost, metadata
), m AS (
    -- This run's rows: those just inserted, and those it wrote before (tool rows), which are the visible
    -- rows after its first input row (a session runs one run at a time, and `c` proves it still is ours).
    SELECT input_tokens, output_tokens, cost, metadata FROM ins
    UNION ALL
    SELECT input_tokens, output_tokens, cost, metadata FROM agent_chat_messages
     WHERE session_id = $1 AND user_id = $2 AND seq > $9 AND EXISTS (SELECT 1 FROM c)
)
SELECT EXISTS (SELECT 1 FROM c) AS owned, {SUMS} FROM m WHERE m.metadata ? 'cost_source'
"""

_RENEW_SQL = """
UPDATE agent_chat_sessions s SET lease_expires_at = now() + make_interval(secs => $2)
 WHERE (id, user_id, run_id) IN (SELECT * FROM unnest($3::uuid[], $4::uuid[], $5::uuid[]))
   AND status = 'running' AND lease_owner = $1 AND lease_expires_at > now()
RETURNING run_id,
          EXISTS (SELECT 1 FROM agent_runs r
                   WHERE r.id = s.run_id AND r.user_id = s.user_id AND r.cancel_requested_at IS NOT NULL) AS cancel
"""

# Not scoped by user: the sweep is the system recovering every user's runs whose process died, and it
# returns nothing to any caller. SKIP LOCKED lets several replicas sweep at once without waiting on each other.
_SWEEP_SQL = f"""
WITH expired AS (
    SELECT id, replace(gen_random_uuid()::text, '-', '') AS error_id FROM agent_chat_sessions
     WHERE status = 'running' AND lease_expires_at < now()
     ORDER BY lease_expires_at LIMIT $1
       FOR UPDATE SKIP LOCKED
), lost AS (
    UPDATE agent_chat_sessions s
       SET status = 'failed', error_id = e.error_id, updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
           state_snapshot = s.state_snapshot || jsonb_build_object('status', 'failed', 'run_id', s.run_id::text,
                                                                   'error_id', e.error_id)
      FROM expired e WHERE s.id = e.id
    RETURNING s.id AS session_id, s.user_id, s.run_id, s.error_id
), runs AS (
    UPDATE agent_runs r
       SET status = 'failed', error_code = 'run_lost', error_id = l.error_id, finished_at = now(), log_complete = true
      FROM lost l WHERE r.id = l.run_id AND r.user_id = l.user_id AND r.status = 'running'
    RETURNING r.id, r.user_id, r.error_id
), lost_events AS (
    -- The stream's end, for whoever resumes it (the process that would have written one is gone).
    INSERT INTO agent_run_events (run_id, seq, user_id, data, terminal)
    SELECT id, {LOST_RUN_SEQ}, user_id, json_build_object(
               'type', 'RUN_ERROR', 'code', 'run_lost',
               'message', 'the run was lost: its server stopped (error_id ' || error_id || ')')::text, true
      FROM runs
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT l.session_id, l.user_id, l.run_id, l.error_id, pg_notify('{EVENTS_CHANNEL}', l.run_id::text) IS NULL AS woke
  FROM lost l
"""

# A run that finished but whose process died before its terminal event was stored (a moment's window):
# its log gets an ending too, so that a resumed stream never waits forever. Grace: the owner writes it
# within milliseconds when alive.
_REPAIR_SQL = f"""
WITH incomplete AS (
    SELECT id, user_id, session_id, status, error_code, error_id FROM agent_runs
     WHERE NOT log_complete AND status <> 'running' AND finished_at < now() - make_interval(secs => $2)
     ORDER BY finished_at LIMIT $1
       FOR UPDATE SKIP LOCKED
), closed AS (
    UPDATE agent_runs r SET log_complete = true FROM incomplete i WHERE r.id = i.id RETURNING r.id
), ins AS (
    INSERT INTO agent_run_events (run_id, seq, user_id, data, terminal)
    SELECT i.id, {LOST_RUN_SEQ}, i.user_id, CASE
               WHEN i.status = 'failed' THEN json_build_object(
                   'type', 'RUN_ERROR', 'code', i.error_code,
                   'message', 'the run failed (error_id ' || i.error_id || ')')
               ELSE json_build_object('type', 'RUN_FINISHED', 'threadId', i.session_id, 'runId', i.id)
           END::text, true
      FROM incomplete i
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT id, pg_notify('{EVENTS_CHANNEL}', id::text) IS NULL AS woke FROM closed
"""

# Retention: the events of runs that finished long enough ago; the run rows (history, error ids) stay.
_EXPIRE_SQL = """
WITH old AS (
    UPDATE agent_runs SET events_expired = true
     WHERE id IN (SELECT id FROM agent_runs
                   WHERE NOT events_expired AND finished_at < now() - make_interval(secs => $1)
                   ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)
    RETURNING id, user_id
)
DELETE FROM agent_run_events e USING old WHERE e.run_id = old.id AND e.user_id = old.user_id
"""
_SWEEP_BATCH = 500


_LIST_SQL = """
SELECT r.id, r.status, r.error_code, r.error_id, r.created_at, r.finished_at, count(*) OVER () AS total
  FROM agent_runs r
 WHERE r.session_id = $1 AND r.user_id = $2
 ORDER BY r.created_at DESC, r.id DESC LIMIT $3 OFFSET $4
"""


class RunSummary(BaseModel):
    id: UUID
    status: Literal["running", "completed", "failed", "cancelled"]
    error_code: str | None = Field(description="Why a failed run failed (e.g. run_timeout, run_lost, llm_timeout).")
    error_id: str | None = Field(description="Also on the session, in the RUN_ERROR event and in the logs.")
    created_at: datetime
    finished_at: datetime | None


class StartedRun(BaseModel):
    session: Session
    run_id: UUID
    first_seq: int
    profile: Profile
    client_state: dict[str, JsonValue] | None = Field(default=None, description="The session's AG-UI state.")


class RunEnd(BaseModel):
    """What the finish wrote: `owned` is False when the run had lost its session to the sweep (its lease
    expired): its rows are still stored and billed, but the session's status is the sweep's."""

    owned: bool
    totals: UsageTotals


class RunEndRequest(BaseModel):
    """How a run ended: the session's status (`outcome`), the run row's (`run_status`: a cancelled run
    leaves its session `completed`), and the rows it still has to store."""

    outcome: Literal["completed", "failed"]
    run_status: Literal["completed", "failed", "cancelled"]
    rows: list[NewMessage]
    error_code: str | None = None
    error_id: str | None = None
    # What the session waits for from here on (engine/runs/request/pending.py): a run that stopped for approvals or
    # frontend tools leaves it; every other end clears it.
    waiting: dict[str, JsonValue] | None = None


class RenewedLeases(BaseModel):
    kept: set[UUID]
    # Runs still held whose cancel was asked for (a NOTIFY that did not reach this process).
    cancel_requested: set[UUID]


class HeldRun(BaseModel):
    session_id: UUID
    user_id: UUID
    run_id: UUID


class LostRun(HeldRun):
    error_id: str


class RunIdTakenError(Exception):
    """The run id is already used (a client reused its AG-UI runId); the caller picks a new one."""


class RunStore:
    def __init__(self, pool: asyncpg.Pool, *, owner: str, lease_seconds: float) -> None:
        self._pool = pool
        self.owner = owner
        self._lease_seconds = lease_seconds

    async def start(
        self,
        ctx: RequestContext,
        session_id: UUID,
        run_id: UUID,
        messages: list[NewMessage],
        *,
        pending_id: str | None = None,
        client_state: dict[str, JsonValue] | None = None,
    ) -> StartedRun | None:
        """Move the session to `running` under this process's lease and store the run's input messages.

        The run takes the session's pending turn (AG-UI interrupts, frontend tool calls) it was planned
        against, `pending_id` (None: nothing pending), and stores the client's AG-UI state when given.

        None when the session is running already, or waits for another pending turn than `pending_id` (the
        caller re-plans, or sweeps and retries). Raises NotFoundError (missing or foreign session), the
        user's quota errors (engine/quotas.py: runs in progress, runs per minute, budgets), ConflictError (a
        message id already stored) and RunIdTakenError. Nothing is changed when it raises or returns None.
        """
        batch = MessageBatch(messages)
        try:
            row = await self._pool.fetchrow(
                _START_SQL,
                session_id,
                ctx.user_id,
                run_id,
                self.owner,
                self._lease_seconds,
                batch.visible,
                batch.audit,
                batch.title,
                *batch.arrays(),
                pending_id,
                client_state,
            )
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "agent_runs_pkey":
                raise RunIdTakenError(str(run_id)) from exc
            raise batch.conflict() from exc
        except asyncpg.PostgresError as exc:
            refused = quota_error(exc)
            if refused is not None:
                metrics.admission_refused(refused.code)
                raise refused from exc
            raise
        if row is None:
            await self._require_session(ctx, session_id)
            return None
        profile = default_profile(ctx) if row["profile"] is None else row_to_profile(row["profile"])
        return StartedRun(
            session=row_to_session(row),
            run_id=run_id,
            first_seq=row["first_seq"],
            profile=profile,
            client_state=row["client_state"],
        )

    async def _require_session(self, ctx: RequestContext, session_id: UUID) -> None:
        found = await self._pool.fetchval(
            "SELECT 1 FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
        )
        if found is None:
            raise session_not_found(session_id)

    async def finish(self, ctx: RequestContext, started: StartedRun, end: RunEndRequest) -> RunEnd:
        """Store the run's remaining rows and record its end, in one statement; the run's totals come back."""
        session_id, run_id = started.session.id, started.run_id
        batch = MessageBatch(end.rows)
        row = await self._pool.fetchrow(
            _FINISH_SQL,
            session_id,
            ctx.user_id,
            run_id,
            end.outcome,
            end.error_id,
            end.error_code,
            batch.visible,
            batch.audit,
            started.first_seq,
            *batch.arrays(),
            end.run_status,
            end.waiting,
        )
        assert row is not None
        if row["owned"]:
            return RunEnd(owned=True, totals=totals_of(row))
        # The sweep failed the run meanwhile: what it spent is still stored (and billed), its status is not.
        log.warning("run finished after losing its lease", extra={"run_id": str(run_id), "outcome": end.run_status})
        await insert_messages(self._pool, ctx, session_id, end.rows)
        return RunEnd(owned=False, totals=await run_totals(self._pool, ctx, session_id, str(run_id)))

    async def list_for_session(
        self, ctx: RequestContext, session_id: UUID, *, limit: int, offset: int
    ) -> Page[RunSummary]:
        """The session's runs, newest first (404 for a session that is missing or someone else's)."""
        rows = await self._pool.fetch(_LIST_SQL, session_id, ctx.user_id, limit, offset)
        if not rows:
            await self._require_session(ctx, session_id)
        total = rows[0]["total"] if rows else 0
        if not rows and offset > 0:
            # Past the last page: the total still has to be counted.
            total = await self._pool.fetchval(
                "SELECT count(*) FROM agent_runs WHERE session_id = $1 AND user_id = $2", session_id, ctx.user_id
            )
        items = [RunSummary.model_validate(dict(row)) for row in rows]
        return Page[RunSummary](items=items, total=total, limit=limit, offset=offset)

    async def renew(self, runs: list[HeldRun]) -> RenewedLeases:
        """Extend the leases of this process's runs; says which still hold theirs, and which to cancel."""
        if not runs:
            return RenewedLeases(kept=set(), cancel_requested=set())
        rows = await self._pool.fetch(
            _RENEW_SQL,
            self.owner,
            self._lease_seconds,
            [r.session_id for r in runs],
            [r.user_id for r in runs],
            [r.run_id for r in runs],
        )
        return RenewedLeases(
            kept={row["run_id"] for row in rows}, cancel_requested={row["run_id"] for row in rows if row["cancel"]}
        )

    async def sweep(self) -> list[LostRun]:
        """Fail every run whose lease expired (its process died or stopped renewing): `run_lost`, also as the
        last event of its log."""
        rows = await self._pool.fetch(_SWEEP_SQL, _SWEEP_BATCH)
        return [
            LostRun(session_id=r["session_id"], user_id=r["user_id"], run_id=r["run_id"], error_id=r["error_id"])
            for r in rows
        ]

    async def repair_logs(self, *, grace_seconds: float) -> int:
        """End the logs of finished runs whose terminal event was never stored; returns how many."""
        return len(await self._pool.fetch(_REPAIR_SQL, _SWEEP_BATCH, grace_seconds))

    async def expire_events(self, *, retention_seconds: float) -> None:
        """Delete the events of runs that finished more than `retention_seconds` ago (a batch per call)."""
        await self._pool.execute(_EXPIRE_SQL, retention_seconds, _SWEEP_BATCH)


__all__ = [
    "HeldRun",
    "LostRun",
    "RunEnd",
    "RunEndRequest",
    "RunIdTakenError",
    "RunStore",
    "RunSummary",
    "StartedRun",
]
