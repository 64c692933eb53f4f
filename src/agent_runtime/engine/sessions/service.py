"""Sessions: owner-scoped CRUD and the run status machine (pending -> running -> completed|failed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal
from uuid import UUID, uuid4

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import NotFoundError, RunInProgressError
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.sessions.models import Session, SessionCreate, SessionUpdate, StateSnapshot

_COLUMNS = (
    "id, title, status, state_snapshot, error_id, billing_currency, billing_country_snapshot, model, "
    "created_at, updated_at"
)


def row_to_session(row: asyncpg.Record) -> Session:
    return Session(
        id=row["id"],
        title=row["title"],
        status=row["status"],
        state_snapshot=StateSnapshot.model_validate(row["state_snapshot"]),
        error_id=row["error_id"],
        billing_currency=row["billing_currency"],
        billing_country_snapshot=row["billing_country_snapshot"],
        model=row["model"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def session_not_found(session_id: UUID) -> NotFoundError:
    # Identical for "missing" and "someone else's" so that ids cannot be probed.
    return NotFoundError(f"session {session_id} not found")


def _like_pattern(q: str) -> str:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class SessionService:
    def __init__(self, pool: asyncpg.Pool, profiles: ProfileService, *, model: str, stale_run_after: timedelta):
        self._pool = pool
        self._profiles = profiles
        self._model = model
        self._stale_run_after = stale_run_after

    async def create(self, ctx: RequestContext, data: SessionCreate) -> Session:
        profile = await self._profiles.get(ctx)
        row = await self._pool.fetchrow(
            f"""
            INSERT INTO agent_chat_sessions (id, user_id, title, billing_currency, billing_country_snapshot, model)
            VALUES ($1, $2, $3, 'CNY', $4, $5)
            RETURNING {_COLUMNS}
            """,
            uuid4(),
            ctx.user_id,
            data.title,
            profile.settings.preferences.country,
            self._model,
        )
        assert row is not None
        return row_to_session(row)

    async def ensure(self, ctx: RequestContext, session_id: UUID) -> Session:
        """Return the caller's session, creating it under this id on first use (AG-UI threads)."""
        existing = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
        )
        if existing is not None:
            return row_to_session(existing)
        profile = await self._profiles.get(ctx)
        row = await self._pool.fetchrow(
            f"""
            INSERT INTO agent_chat_sessions (id, user_id, billing_currency, billing_country_snapshot, model)
            VALUES ($1, $2, 'CNY', $3, $4)
            ON CONFLICT (id) DO NOTHING
            RETURNING {_COLUMNS}
            """,
            session_id,
            ctx.user_id,
            profile.settings.preferences.country,
            self._model,
        )
        if row is None:
            # The id exists: either a concurrent first use by the same caller, or another user's session.
            return await self.get(ctx, session_id)
        return row_to_session(row)

    async def get(self, ctx: RequestContext, session_id: UUID) -> Session:
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
        )
        if row is None:
            raise session_not_found(session_id)
        return row_to_session(row)

    async def list(self, ctx: RequestContext, *, limit: int, offset: int, q: str | None = None) -> Page[Session]:
        pattern = _like_pattern(q) if q else None
        where = "user_id = $1 AND ($2::text IS NULL OR title ILIKE $2)"
        async with self._pool.acquire() as conn:
            total = await conn.fetchval(f"SELECT count(*) FROM agent_chat_sessions WHERE {where}", ctx.user_id, pattern)
            rows = await conn.fetch(
                f"""
                SELECT {_COLUMNS} FROM agent_chat_sessions WHERE {where}
                ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4
                """,
                ctx.user_id,
                pattern,
                limit,
                offset,
            )
        return Page[Session](items=[row_to_session(r) for r in rows], total=total, limit=limit, offset=offset)

    async def update(self, ctx: RequestContext, session_id: UUID, data: SessionUpdate) -> Session:
        row = await self._pool.fetchrow(
            f"""
            UPDATE agent_chat_sessions SET title = $3, updated_at = now()
            WHERE id = $1 AND user_id = $2 RETURNING {_COLUMNS}
            """,
            session_id,
            ctx.user_id,
            data.title,
        )
        if row is None:
            raise session_not_found(session_id)
        return row_to_session(row)

    async def delete(self, ctx: RequestContext, session_id: UUID) -> None:
        # Messages go with it through ON DELETE CASCADE on the (session_id, user_id) foreign key.
        deleted = await self._pool.fetchval(
            "DELETE FROM agent_chat_sessions WHERE id = $1 AND user_id = $2 RETURNING id", session_id, ctx.user_id
        )
        if deleted is None:
            raise session_not_found(session_id)

    async def start_run(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> Session:
        """Move the session to `running` in one statement; a concurrent second start gets 409.

        A run whose process died leaves `running` behind; it is taken over once it is older than the
        stale limit (twice the run timeout), so a crash never locks a session forever.
        """
        row = await self._pool.fetchrow(
            f"""
            UPDATE agent_chat_sessions
               SET status = 'running', run_id = $3, run_started_at = now(), error_id = NULL, updated_at = now(),
                   state_snapshot = state_snapshot || jsonb_build_object('status', 'running', 'run_id', $5::text,
                                                                         'error_id', NULL)
             WHERE id = $1 AND user_id = $2
               AND (status <> 'running' OR run_started_at < now() - $4::interval)
            RETURNING {_COLUMNS}
            """,
            session_id,
            ctx.user_id,
            run_id,
            self._stale_run_after,
            str(run_id),
        )
        if row is not None:
            return row_to_session(row)
        await self.get(ctx, session_id)  # 404 when missing or foreign
        raise RunInProgressError(f"session {session_id} already has a run in progress")

    async def finish_run(
        self,
        ctx: RequestContext,
        session_id: UUID,
        run_id: UUID,
        outcome: Literal["completed", "failed"],
        *,
        error_id: str | None = None,
    ) -> bool:
        """Record the run's end; `status` and `state_snapshot.status` change in one statement.

        Returns False when the run no longer owns the session (it was taken over as stale).
        """
        patch = {"status": outcome, "run_id": str(run_id), "error_id": error_id}
        finished = await self._pool.fetchval(
            """
            UPDATE agent_chat_sessions
               SET status = $4, error_id = $5, updated_at = now(), state_snapshot = state_snapshot || $6::jsonb
             WHERE id = $1 AND user_id = $2 AND run_id = $3 AND status = 'running'
            RETURNING id
            """,
            session_id,
            ctx.user_id,
            run_id,
            outcome,
            error_id,
            patch,
        )
        return finished is not None
