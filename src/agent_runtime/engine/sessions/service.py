"""Sessions: owner-scoped CRUD. A run's status changes (pending -> running -> completed|failed) are the run
store's (`engine/runs/store.py`), enforced by the trigger on the session row."""

from __future__ import annotations

from uuid import UUID, uuid4

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import NotFoundError
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.quotas import quota_error
from agent_runtime.engine.sessions.models import Session, SessionCreate, SessionUpdate, StateSnapshot

SESSION_COLUMNS = (
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
    def __init__(self, pool: asyncpg.Pool, profiles: ProfileService, *, model: str):
        self._pool = pool
        self._profiles = profiles
        self._model = model

    async def create(self, ctx: RequestContext, data: SessionCreate) -> Session:
        profile = await self._profiles.get(ctx)
        row = await self._insert(
            f"""
            INSERT INTO agent_chat_sessions (id, user_id, title, billing_currency, billing_country_snapshot, model)
            VALUES ($1, $2, $3, 'CNY', $4, $5)
            RETURNING {SESSION_COLUMNS}
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
            f"SELECT {SESSION_COLUMNS} FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
        )
        if existing is not None:
            return row_to_session(existing)
        profile = await self._profiles.get(ctx)
        row = await self._insert(
            f"""
            INSERT INTO agent_chat_sessions (id, user_id, billing_currency, billing_country_snapshot, model)
            VALUES ($1, $2, 'CNY', $3, $4)
            ON CONFLICT (id) DO NOTHING
            RETURNING {SESSION_COLUMNS}
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

    async def _insert(self, query: str, *args: object) -> asyncpg.Record | None:
        """A session insert; MAX_SESSIONS_PER_USER is enforced by the database (trigger, migrations/0007)."""
        try:
            row: asyncpg.Record | None = await self._pool.fetchrow(query, *args)
        except asyncpg.PostgresError as exc:
            refused = quota_error(exc)
            if refused is not None:
                raise refused from exc
            raise
        return row

    async def get(self, ctx: RequestContext, session_id: UUID) -> Session:
        row = await self._pool.fetchrow(
            f"SELECT {SESSION_COLUMNS} FROM agent_chat_sessions WHERE id = $1 AND user_id = $2", session_id, ctx.user_id
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
                SELECT {SESSION_COLUMNS} FROM agent_chat_sessions WHERE {where}
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
            WHERE id = $1 AND user_id = $2 RETURNING {SESSION_COLUMNS}
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
