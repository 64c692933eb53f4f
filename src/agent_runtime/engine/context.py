"""The caller's identity, passed to every engine method that touches user-owned data."""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, ConfigDict


class RequestContext(BaseModel):
    model_config = ConfigDict(frozen=True)

    user_id: UUID
