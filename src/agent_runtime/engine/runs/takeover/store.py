"""A takeover's statements: the resume point a run stores, and the claim of runs whose process died."""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

import asyncpg
from pydantic import BaseModel, Field, JsonValue

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.flow.model_call import IntentDecided
from agent_runtime.engine.profiles.models import Profile
from agent_runtime.engine.profiles.repository import row_to_profile
from agent_runtime.engine.profiles.service import default_profile
from agent_runtime.engine.runs.ledger.store import StartedRun
from agent_runtime.engine.runs.request.models import RunInput
from agent_runtime.engine.runs.takeover.repository import (
    CLAIM_SQL,
    RELEASE_SQL,
    RESUME_POINT_SQL,
    TAKEOVER_SEQ_STRIDE,
)
from agent_runtime.engine.sessions.models import Session
from agent_runtime.engine.sessions.repository import row_to_session


class ClaimedRun(BaseModel):
    """A run this process took over: what its start left, to run it again from its last stored step."""

    session: Session
    user_id: UUID
    run_id: UUID
    run_input: RunInput
    resumes: IntentDecided | None = Field(description="The decided intent (None: the turn starts again).")
    first_seq: int
    takeovers: int = Field(ge=1, description="This is the run's n-th takeover.")
    profile: Profile
    client_state: dict[str, JsonValue] | None
    reserved_cny: Decimal
    has_memories: bool
    memory_generation: int

    @property
    def ctx(self) -> RequestContext:
        return RequestContext(user_id=self.user_id)

    def started(self) -> StartedRun:
        """The run as its start left it, for this process to go on with."""
        return StartedRun(
            session=self.session,
            run_id=self.run_id,
            first_seq=self.first_seq,
            profile=self.profile,
            client_state=self.client_state,
            reserved_cny=self.reserved_cny,
            has_memories=self.has_memories,
            memory_generation=self.memory_generation,
            takeovers=self.takeovers,
        )

    @property
    def first_event_seq(self) -> int:
        """The seq the taken-over run's events continue after."""
        return self.takeovers * TAKEOVER_SEQ_STRIDE


class TakeoverStore:
    def __init__(self, pool: asyncpg.Pool, *, owner: str, lease_seconds: float) -> None:
        self._pool = pool
        self._owner = owner
        self._lease_seconds = lease_seconds

    async def record_resume_point(self, ctx: RequestContext, run_id: UUID, decided: IntentDecided) -> None:
        await self._pool.execute(RESUME_POINT_SQL, run_id, ctx.user_id, decided.model_dump(mode="json"))

    async def release(self, ctx: RequestContext, run: StartedRun, *, sent: Decimal) -> None:
        """Give the run to another replica's next sweep (a draining process that could not finish it)."""
        await self._pool.execute(RELEASE_SQL, run.session.id, ctx.user_id, run.run_id, self._owner, sent)

    async def claim(self, room: int, *, most_takeovers: int) -> list[ClaimedRun]:
        """Take over up to `room` runs whose lease expired (each taken over fewer than `most_takeovers` times)."""
        if room <= 0 or most_takeovers <= 0:
            return []
        rows = await self._pool.fetch(CLAIM_SQL, self._owner, room, most_takeovers, self._lease_seconds)
        return [_claimed(row) for row in rows]


def _claimed(row: asyncpg.Record) -> ClaimedRun:
    ctx = RequestContext(user_id=row["user_id"])
    point = row["resume_point"]
    return ClaimedRun(
        session=row_to_session(row),
        user_id=row["user_id"],
        run_id=row["run_id"],
        run_input=RunInput.model_validate(row["run_input"]),
        resumes=IntentDecided.model_validate(point) if point is not None else None,
        first_seq=row["first_seq"],
        takeovers=row["takeovers"],
        profile=default_profile(ctx) if row["profile"] is None else row_to_profile(row["profile"]),
        client_state=row["client_state"],
        reserved_cny=row["run_reserved_cny"],
        has_memories=row["has_memories"],
        memory_generation=row["memory_generation"],
    )
