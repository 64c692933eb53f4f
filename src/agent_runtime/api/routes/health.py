from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from agent_runtime.api.deps import Engine
from agent_runtime.api.errors import error_json, error_responses

router = APIRouter(prefix="/health", tags=["health"])


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ok"] = "ok"
    database: Literal["ok"] = "ok"
    demo_model: bool


@router.get("/live", response_model=Health)
async def live() -> Health:
    return Health()


@router.get("/ready", response_model=Readiness, responses=error_responses(503))
async def ready(engine: Engine) -> Readiness | JSONResponse:
    if not await engine.is_ready():
        return error_json(503, "unavailable", "database is not reachable")
    return Readiness(demo_model=engine.settings.is_demo_model)
