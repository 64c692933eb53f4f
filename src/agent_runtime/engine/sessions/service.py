"""Sessions: owner-scoped CRUD. A run's status changes (pending -> running -> completed|failed) are the run
store's (`engine/runs/ledger/store.py`), enforced by the trigger on the session row."""

from __future__ import annotations

from uuid import UUID, uuid4

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import session_not_found
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.quotas import quota_error
from agent_runtime.engine.sessions.models import Session, SessionCreate, SessionUpdate
from agent_runtime.engine.sessions.repository import (
    COUNT_SQL,
    DELETE_SQL,
    GET_SQL,
    INSERT_SQL,
    LIST_SQL,
    UPDATE_TITLE_SQL,
    row_to_session,
)


def _like_pattern(q: str) -> str:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class SessionService:
    def __init__(self, pool: asyncpg.Pool, profiles: ProfileService, *, model: str):
        self._pool = pool
        self._profiles = profiles
        self._model = model

    async def create(self, ctx: RequestContext, data: SessionCreate) -> Session:
        """MAX_SESSIONS_PER_USER is enforced by the database (trigger, migrations/0007)."""
        profile = await self._profiles.get(ctx)
        try:
            row = await self._pool.fetchrow(
                INSERT_SQL, uuid4(), ctx.user_id, data.title, profile.settings.preferences.country, self._model
            )
        except asyncpg.PostgresError as exc:
            refused = quota_error(exc)
            if refused is not None:
                raise refused from exc
            raise
        assert row is not None
        return row_to_session(row)

    async def get(self, ctx: RequestContext, session_id: UUID) -> Session:
        row = await self._pool.read(lambda conn: conn.fetchrow(GET_SQL, session_id, ctx.user_id))
        if row is None:
            raise session_not_found(session_id)
        return row_to_session(row)

    async def list(self, ctx: RequestContext, *, limit: int, offset: int, q: str | None = None) -> Page[Session]:
        pattern = _like_pattern(q) if q else None

        async def read(conn: asyncpg.Connection) -> Page[Session]:
            total = await conn.fetchval(COUNT_SQL, ctx.user_id, pattern)
            rows = await conn.fetch(LIST_SQL, ctx.user_id, pattern, limit, offset)
            return Page[Session](items=[row_to_session(r) for r in rows], total=total, limit=limit, offset=offset)

        page: Page[Session] = await self._pool.read(read)
        return page

    async def update(self, ctx: RequestContext, session_id: UUID, data: SessionUpdate) -> Session:
        row = await self._pool.fetchrow(UPDATE_TITLE_SQL, session_id, ctx.user_id, data.title)
        if row is None:
            raise session_not_found(session_id)
        return row_to_session(row)

    async def delete(self, ctx: RequestContext, session_id: UUID) -> None:
        deleted = await self._pool.fetchval(DELETE_SQL, session_id, ctx.user_id)
        if deleted is None:
            raise session_not_found(session_id)
