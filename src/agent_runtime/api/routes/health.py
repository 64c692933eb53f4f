from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from agent_runtime.api.deps import Engine
from agent_runtime.api.errors import app_error_json, error_json, error_responses
from agent_runtime.engine.errors import DatabaseUnavailableError

router = APIRouter(prefix="/health", tags=["health"])


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ok"] = "ok"
    database: Literal["ok"] = "ok"
    demo_model: bool
    runs_in_flight: int = Field(description="Runs this process executes now.")
    max_concurrent_runs: int = Field(description="MAX_CONCURRENT_RUNS: at this many, readiness answers 503.")


@router.get("/live", response_model=Health)
async def live() -> Health:
    return Health()


@router.get("/ready", response_model=Readiness, responses=error_responses(503))
async def ready(engine: Engine) -> Readiness | JSONResponse:
    """503 while the process shuts down (`shutting_down`), while it runs as many runs as it may
    (`server_busy`: a load balancer should send new runs elsewhere), without its database (`database_unavailable`,
    with Retry-After, within DATABASE_ACQUIRE_TIMEOUT_SECONDS; 200 again once it answers),
    and until CrewAI and LiteLLM are loaded (`warming_up`, seconds after a start; `warm_up_failed` if their
    import failed: see the log). So a run sent once this answers 200 does not wait for the imports.
    `/health/live` answers 200 all along."""
    admission = engine.runs.admission
    if admission.draining:
        return error_json(503, "shutting_down", "the server is shutting down")
    if admission.full:
        return error_json(503, "server_busy", f"the server runs {admission.in_flight} runs, its maximum")
    if not await engine.is_ready():
        return app_error_json(DatabaseUnavailableError())
    # Readiness waits for the warm-up, not only the first run: a load balancer that sent runs as soon as the
    # database answered made the first one after every start wait seconds for CrewAI's import.
    warm_up = engine.runs.warm_up
    if warm_up == "warming_up":
        return error_json(503, "warming_up", "CrewAI and LiteLLM are still loading; retry shortly")
    if warm_up == "failed":
        return error_json(503, "warm_up_failed", "loading CrewAI and LiteLLM failed: no run can start (see the log)")
    return Readiness(
        demo_model=engine.settings.is_demo_model,
        runs_in_flight=admission.in_flight,
        max_concurrent_runs=admission.limit,
    )
