from __future__ import annotations

from fastapi import APIRouter

from agent_runtime.api.deps import Caller, Engine
from agent_runtime.api.errors import error_responses
from agent_runtime.engine.profiles.models import Profile
from agent_runtime.engine.profiles.service import ProfileUpdate

router = APIRouter(prefix="/v1/profile", tags=["profile"])


@router.get("", response_model=Profile, responses=error_responses(401))
async def get_profile(engine: Engine, ctx: Caller) -> Profile:
    """The caller's profile; defaults (zh-CN, Asia/Shanghai, CN) until one is saved."""
    return await engine.profiles.get(ctx)


@router.put("", response_model=Profile, responses=error_responses(400, 401, 408, 413, 422))
async def put_profile(body: ProfileUpdate, engine: Engine, ctx: Caller) -> Profile:
    """Replace the caller's profile; settings of any version are stored upgraded to the latest."""
    return await engine.profiles.put(ctx, body)
