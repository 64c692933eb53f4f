"""Profiles: read (any stored settings version) and write (always the latest version)."""

from __future__ import annotations

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.profiles.models import (
    SETTINGS_V2_EXAMPLE,
    Profile,
    ProfileSettings,
    ProfileSettingsV2,
    upgrade_to_latest,
)
from agent_runtime.engine.profiles.repository import GET_SQL, PUT_SQL, SET_BIO_SQL, row_to_profile
from agent_runtime.engine.text import ClientText, storable


class ProfileUpdate(BaseModel):
    """Full replacement of the caller's profile (PUT semantics)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"username": "lin", "bio": "Hiker and amateur astronomer.", "settings": SETTINGS_V2_EXAMPLE}]
        },
    )

    username: ClientText = Field(default="", max_length=64)
    bio: ClientText | None = Field(default=None, max_length=4000)
    settings: ProfileSettings = Field(
        default_factory=ProfileSettingsV2,
        description="Any known settings version; stored upgraded to the latest (v2).",
    )


def default_profile(ctx: RequestContext) -> Profile:
    return Profile(user_id=ctx.user_id, username="", bio=None, settings=ProfileSettingsV2())


class ProfileService:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, ctx: RequestContext, *, conn: asyncpg.Connection | None = None) -> Profile:
        if conn is not None:
            row = await conn.fetchrow(GET_SQL, ctx.user_id)
        else:
            row = await self._pool.read(lambda pooled: pooled.fetchrow(GET_SQL, ctx.user_id))
        return default_profile(ctx) if row is None else row_to_profile(row)

    async def put(self, ctx: RequestContext, update: ProfileUpdate) -> Profile:
        settings = upgrade_to_latest(update.settings)
        row = await self._pool.fetchrow(
            PUT_SQL,
            ctx.user_id,
            update.username,
            update.bio,
            settings.model_dump(mode="json"),
        )
        assert row is not None
        return row_to_profile(row)

    async def set_bio(self, ctx: RequestContext, bio: str) -> str:
        """The `update_bio` tool's write (the run's own user): only the bio changes, the rest stays."""
        stored: str = await self._pool.fetchval(
            SET_BIO_SQL,
            ctx.user_id,
            storable(bio),
        )
        return stored
