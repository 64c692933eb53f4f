"""GET /metrics: Prometheus' text format. Public like /health (scrapers carry no user token); ops who want
it private move it to its own port (METRICS_PORT) or turn it off (METRICS_ENABLED=false)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from agent_runtime.observability.metrics import CONTENT_TYPE_LATEST, exposition

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
