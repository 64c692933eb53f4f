"""The profiles domain's SQL: named statements and the row -> `Profile` mapper (the convention is in
`engine/sessions/repository.py`). `profiles` is keyed by its owner: every statement takes `user_id`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from agent_runtime.engine.profiles.models import Profile
from agent_runtime.engine.profiles.stored import read_stored_settings

_COLUMNS = "user_id, username, bio, settings, created_at, updated_at"

GET_SQL = f"SELECT {_COLUMNS} FROM profiles WHERE user_id = $1"

PUT_SQL = f"""
INSERT INTO profiles (user_id, username, bio, settings)
VALUES ($1, $2, $3, $4)
ON CONFLICT (user_id) DO UPDATE
   SET username = EXCLUDED.username, bio = EXCLUDED.bio,
       settings = EXCLUDED.settings, updated_at = now()
RETURNING {_COLUMNS}
"""

# Only the bio changes, the rest stays (or takes its defaults for a user without a profile yet).
SET_BIO_SQL = """
INSERT INTO profiles (user_id, bio) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET bio = EXCLUDED.bio, updated_at = now()
RETURNING bio
"""


def row_to_profile(row: asyncpg.Record | Mapping[str, Any]) -> Profile:
    """A `profiles` row (or the same columns as a mapping, e.g. `to_jsonb(p)` from another statement). Settings
    today's models reject read as their defaults (`stored.py`): an old row never fails a request."""
    return Profile(
        user_id=row["user_id"],
        username=row["username"],
        bio=row["bio"],
        settings=read_stored_settings(row["settings"], user_id=row["user_id"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
