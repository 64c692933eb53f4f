"""A run's life in the database: start, finish, lease renewal and the sweep; one statement each (`repository.py`).

The start is one statement (session to `running` with its lease, the run row, the input messages, the
caller's profile), the finish is one (output rows, status, the run row and the run's totals), and the pool does
not reset connections (`db/pool.py`): tests/runs/test_runs_statements.py pins how many a whole run issues.

Invariants stay in the database: the status machine and lease presence (checks and trigger on the
session row), one run per session (`status <> 'running'` in the start's WHERE), the per-user limit
(trigger `enforce_user_run_limit`), run ids unique (the `agent_runs` key).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Literal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, Field, JsonValue

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.repository import SESSION_OWNED_SQL
from agent_runtime.engine.conversation.store import MessageBatch, insert_messages
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.errors import RunLostError, session_not_found
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.models import Profile
from agent_runtime.engine.profiles.repository import row_to_profile
from agent_runtime.engine.profiles.service import default_profile
from agent_runtime.engine.quotas import quota_error
from agent_runtime.engine.runs.ledger.repository import (
    COUNT_SQL,
    EXPIRE_SQL,
    FINISH_SQL,
    GROW_HOLD_SQL,
    LIST_SQL,
    OTHERS_HOLD_SQL,
    RENEW_SQL,
    REPAIR_SQL,
    SETTLE_LATE_SQL,
    START_SQL,
    SWEEP_SQL,
    TAKEOVERS_SQL,
    FinishRecord,
    LogEndings,
    StartRecord,
)
from agent_runtime.engine.sessions.models import Session, WaitingTurn, waiting_turn
from agent_runtime.engine.sessions.repository import row_to_session
from agent_runtime.engine.usage.models import UsageTotals
from agent_runtime.engine.usage.repository import totals_of
from agent_runtime.engine.usage.service import run_totals
from agent_runtime.observability import metrics

log = logging.getLogger(__name__)


_SWEEP_BATCH = 500


class RunSummary(BaseModel):
    id: UUID
    status: Literal["running", "completed", "failed", "cancelled"]
    error_code: str | None = Field(description="Why a failed run failed (e.g. run_timeout, run_lost, llm_timeout).")
    error_id: str | None = Field(description="Also on the session, in the RUN_ERROR event and in the logs.")
    created_at: datetime
    finished_at: datetime | None
    waiting_for: WaitingTurn | None = Field(
        description="On the run that stopped at approvals or frontend tools while its session still waits for them: "
        "what answers them (as on the session)."
    )


class StartedRun(BaseModel):
    session: Session
    run_id: UUID
    first_seq: int
    profile: Profile
    client_state: dict[str, JsonValue] | None = Field(default=None, description="The session's AG-UI state.")
    reserved_cny: Decimal = Field(default=Decimal(0), description="What the run holds against the user's budgets.")
    has_memories: bool = Field(default=False, description="The user has long-term memories (nothing to recall else).")
    memory_generation: int = Field(default=0, ge=0, description="The user's memory generation (a delete-all bumps it).")
    takeovers: int = Field(default=0, ge=0, description="How often the run was taken over before this attempt.")


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
    sent_cny: Decimal = Field(default=Decimal(0), description="The estimate of what its calls so far cost.")


class LostRun(HeldRun):
    error_id: str


class RunIdTakenError(Exception):
    """The run id is already used (a client reused its AG-UI runId); the caller picks a new one."""


def _raise_quota_refusal(exc: asyncpg.PostgresError) -> None:
    """Raise the client-facing error when the database refused a quota (engine/quotas.py); else return."""
    refused = quota_error(exc)
    if refused is not None:
        metrics.admission_refused(refused.code)
        raise refused from exc


class RunStore:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        owner: str,
        lease_seconds: float,
        endings: LogEndings,
        reserve: Callable[[], Decimal] | None = None,
        least_reserve: Callable[[], Decimal] | None = None,
        most_takeovers: int = 0,
    ) -> None:
        """`endings`: how the sweep and the log repair end the logs of runs whose process died. `reserve`: the most
        a run started now holds against the user's budgets, and what it holds when the user has no completed run
        (`reservation.py`); None: nothing. `least_reserve`: the least it holds (None: `reserve`)."""
        self._pool = pool
        self.owner = owner
        self._lease_seconds = lease_seconds
        self._endings = endings
        self._reserve = reserve or (lambda: Decimal(0))
        self._least_reserve = least_reserve or self._reserve
        # `most_takeovers`: how often a run may be taken over (RUN_MAX_TAKEOVERS): the sweep leaves such runs to a
        # takeover for one more lease before it fails them.
        self._most_takeovers = most_takeovers

    async def start(
        self,
        ctx: RequestContext,
        session_id: UUID,
        run_id: UUID,
        messages: list[NewMessage],
        *,
        pending_id: str | None = None,
        client_state: dict[str, JsonValue] | None = None,
        regenerate: bool = False,
        run_input: dict[str, JsonValue] | None = None,
        resume_point: dict[str, JsonValue] | None = None,
    ) -> StartedRun | None:
        """Move the session to `running` under this process's lease and store the run's input messages.

        The run takes the session's pending turn (AG-UI interrupts, frontend tool calls) it was planned
        against, `pending_id` (None: nothing pending), and stores the client's AG-UI state when given. A
        regeneration (`regenerate`) records the range of the reply it replaces in the
        same statement (engine/runs/request/regenerate.py), and needs a user message in the thread. The run
        holds its reservation against the user's budgets until it ends (migrations/0009). `run_input` and
        `resume_point` are what a takeover needs to continue the run (migrations/0016, engine/runs/takeover/).

        None when the session is running already, or waits for another pending turn than `pending_id` (the
        caller re-plans, or sweeps and retries). Raises NotFoundError (missing or foreign session), the
        user's quota errors (engine/quotas.py: runs in progress, runs per minute, budgets), ConflictError (a
        message id already stored) and RunIdTakenError. Nothing is changed when it raises or returns None.
        """
        batch = MessageBatch(messages)
        reserved = self._reserve()
        least_reserved = min(self._least_reserve(), reserved)
        try:
            record = StartRecord(
                session_id=session_id,
                user_id=ctx.user_id,
                run_id=run_id,
                lease_owner=self.owner,
                lease_seconds=self._lease_seconds,
                visible=batch.visible,
                audit=batch.audit,
                title=batch.title,
                rows=batch.arrays(),
                pending_id=pending_id,
                client_state=client_state,
                reserved_cny=reserved,
                least_reserved_cny=least_reserved,
                regenerate=regenerate,
                run_input=run_input,
                resume_point=resume_point,
            )
            row = await self._pool.fetchrow(START_SQL, *record.args())
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "agent_runs_pkey":
                raise RunIdTakenError(str(run_id)) from exc
            raise batch.conflict() from exc
        except asyncpg.PostgresError as exc:
            _raise_quota_refusal(exc)
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
            reserved_cny=row["run_reserved_cny"],
            has_memories=row["has_memories"],
            memory_generation=row["memory_generation"],
        )

    async def grow_hold(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, amount: Decimal, *, at_least: Decimal
    ) -> Decimal:
        """Hold `amount` more against the user's budgets for the run, or as much as they have room for but at least
        `at_least`; returns what the run holds now. Raises BudgetExceededError when `at_least` does not fit, and
        RunLostError when the run no longer holds its session."""
        try:
            held = await self._pool.fetchval(GROW_HOLD_SQL, session_id, ctx.user_id, run_id, amount, at_least)
        except asyncpg.PostgresError as exc:
            _raise_quota_refusal(exc)
            raise
        if held is None:
            raise RunLostError("the run lost its lease on the session (it was taken over)")
        return Decimal(held)

    async def others_hold(self, ctx: RequestContext, session_id: UUID) -> Decimal:
        """What the user's runs in progress on their other sessions hold against the budgets."""
        return Decimal(await self._pool.fetchval(OTHERS_HOLD_SQL, ctx.user_id, session_id))

    async def _require_session(self, ctx: RequestContext, session_id: UUID) -> None:
        found = await self._pool.fetchval(SESSION_OWNED_SQL, session_id, ctx.user_id)
        if found is None:
            raise session_not_found(session_id)

    async def finish(self, ctx: RequestContext, started: StartedRun, end: RunEndRequest) -> RunEnd:
        """Store the run's remaining rows and record its end, in one statement; the run's totals come back."""
        session_id, run_id = started.session.id, started.run_id
        batch = MessageBatch(end.rows)
        record = FinishRecord(
            session_id=session_id,
            user_id=ctx.user_id,
            run_id=run_id,
            outcome=end.outcome,
            error_id=end.error_id,
            error_code=end.error_code,
            visible=batch.visible,
            audit=batch.audit,
            first_seq=started.first_seq,
            rows=batch.arrays(),
            run_status=end.run_status,
            waiting=end.waiting,
        )
        row = await self._pool.fetchrow(FINISH_SQL, *record.args())
        assert row is not None
        if row["owned"]:
            return RunEnd(owned=True, totals=totals_of(row))
        if await self._pool.fetchval(TAKEOVERS_SQL, run_id, ctx.user_id) != started.takeovers:
            # Another process took the run over and does its work again: what this one did is not stored twice. (It
            # was not billed either: the takeover charged what this process had sent, from its renewals.)
            log.warning("run finished after another process took it over", extra={"run_id": str(run_id)})
            return RunEnd(owned=False, totals=await run_totals(self._pool, ctx, session_id, str(run_id)))
        # The sweep failed the run meanwhile: what it spent is still stored (and billed), its status is not.
        log.warning("run finished after losing its lease", extra={"run_id": str(run_id), "outcome": end.run_status})
        await insert_messages(self._pool, ctx, session_id, end.rows)
        await self._pool.execute(SETTLE_LATE_SQL, run_id, ctx.user_id)
        return RunEnd(owned=False, totals=await run_totals(self._pool, ctx, session_id, str(run_id)))

    async def list_for_session(
        self, ctx: RequestContext, session_id: UUID, *, limit: int, offset: int
    ) -> Page[RunSummary]:
        """The session's runs, newest first (404 for a session that is missing or someone else's)."""
        rows = await self._pool.fetch(LIST_SQL, session_id, ctx.user_id, limit, offset)
        if not rows:
            await self._require_session(ctx, session_id)
        total = rows[0]["total"] if rows else 0
        if not rows and offset > 0:
            # Past the last page: the total still has to be counted.
            total = await self._pool.fetchval(COUNT_SQL, session_id, ctx.user_id)
        items = [
            RunSummary(
                id=row["id"],
                status=row["status"],
                error_code=row["error_code"],
                error_id=row["error_id"],
                created_at=row["created_at"],
                finished_at=row["finished_at"],
                waiting_for=waiting_turn(row["pending_turn"]),
            )
            for row in rows
        ]
        return Page[RunSummary](items=items, total=total, limit=limit, offset=offset)

    async def renew(self, runs: list[HeldRun]) -> RenewedLeases:
        """Extend the leases of this process's runs; says which still hold theirs, and which to cancel."""
        if not runs:
            return RenewedLeases(kept=set(), cancel_requested=set())
        rows = await self._pool.fetch(
            RENEW_SQL,
            self.owner,
            self._lease_seconds,
            [r.session_id for r in runs],
            [r.user_id for r in runs],
            [r.run_id for r in runs],
            [r.sent_cny for r in runs],
        )
        return RenewedLeases(
            kept={row["run_id"] for row in rows}, cancel_requested={row["run_id"] for row in rows if row["cancel"]}
        )

    async def sweep(self) -> list[LostRun]:
        """Fail every run whose lease expired (its process died or stopped renewing): `run_lost`, also as the
        last event of its log."""
        rows = await self._pool.fetch(
            SWEEP_SQL, _SWEEP_BATCH, self._endings.lost, self._most_takeovers, self._lease_seconds
        )
        return [
            LostRun(session_id=r["session_id"], user_id=r["user_id"], run_id=r["run_id"], error_id=r["error_id"])
            for r in rows
        ]

    async def repair_logs(self, *, grace_seconds: float) -> int:
        """End the logs of finished runs whose terminal event was never stored; returns how many."""
        rows = await self._pool.fetch(
            REPAIR_SQL, _SWEEP_BATCH, grace_seconds, self._endings.failed, self._endings.finished
        )
        return len(rows)

    async def expire_events(self, *, retention_seconds: float) -> None:
        """Delete the events of runs that finished more than `retention_seconds` ago (a batch per call)."""
        await self._pool.execute(EXPIRE_SQL, retention_seconds, _SWEEP_BATCH)


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
