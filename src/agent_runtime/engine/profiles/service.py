"""Profiles: read (any stored settings version) and write (always the latest version)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.profiles.models import (
    Profile,
    ProfileSettings,
    ProfileSettingsV2,
    UserAgentContext,
    parse_profile_settings,
    upgrade_to_latest,
)
from agent_runtime.engine.text import ClientText

_COLUMNS = "user_id, username, bio, settings, created_at, updated_at"


class ProfileUpdate(BaseModel):
    """Full replacement of the caller's profile (PUT semantics)."""

    model_config = ConfigDict(extra="forbid")

    username: ClientText = Field(default="", max_length=64)
    bio: ClientText | None = Field(default=None, max_length=4000)
    settings: ProfileSettings = Field(
        default_factory=ProfileSettingsV2,
        description="Any known settings version; stored upgraded to the latest (v2).",
    )


def row_to_profile(row: asyncpg.Record | Mapping[str, Any]) -> Profile:
    """A `profiles` row (or the same columns as a mapping, e.g. `to_jsonb(p)` from another statement)."""
    settings: dict[str, Any] = row["settings"]
    return Profile(
        user_id=row["user_id"],
        username=row["username"],
        bio=row["bio"],
        settings=parse_profile_settings(settings),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def default_profile(ctx: RequestContext) -> Profile:
    return Profile(user_id=ctx.user_id, username="", bio=None, settings=ProfileSettingsV2())


class ProfileService:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, ctx: RequestContext, *, conn: asyncpg.Connection | None = None) -> Profile:
        query = f"SELECT {_COLUMNS} FROM profiles WHERE user_id = $1"
        row = await (conn or self._pool).fetchrow(query, ctx.user_id)
        return default_profile(ctx) if row is None else row_to_profile(row)

    async def put(self, ctx: RequestContext, update: ProfileUpdate) -> Profile:
        settings = upgrade_to_latest(update.settings)
        row = await self._pool.fetchrow(
            f"""
            INSERT INTO profiles (user_id, username, bio, settings)
            VALUES ($1, $2, $3, $4)
            ON CONFLICT (user_id) DO UPDATE
               SET username = EXCLUDED.username, bio = EXCLUDED.bio,
                   settings = EXCLUDED.settings, updated_at = now()
            RETURNING {_COLUMNS}
            """,
            ctx.user_id,
            update.username,
            update.bio,
            settings.model_dump(mode="json"),
        )
        assert row is not None
        return row_to_profile(row)

    async def agent_context(self, ctx: RequestContext) -> UserAgentContext:
        profile = await self.get(ctx)
        return UserAgentContext(
            user_id=profile.user_id, username=profile.username, bio=profile.bio, settings=profile.settings
        )
