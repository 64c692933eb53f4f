"""The FastAPI application: routes, error handlers, middleware and the engine's lifespan."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, MutableMapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from starlette.types import Scope

from agent_runtime.api.errors import install_error_handlers
from agent_runtime.api.middleware import RequestContextMiddleware, Shedder
from agent_runtime.api.openapi import install_openapi
from agent_runtime.api.reload_signal import reload_on_hangup
from agent_runtime.api.routes import health, memories, metrics, profile, runs, sessions, usage
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.llm.client import Clock
from agent_runtime.engine.runtime import open_engine
from agent_runtime.observability.gc_pauses import GcPauses
from agent_runtime.observability.metrics_server import MetricsServer
from agent_runtime.observability.sampler import sample_forever
from agent_runtime.playground import mount_playground
from agent_runtime.settings import Settings, get_settings

log = logging.getLogger(__name__)


_UNTRACED_PATHS = frozenset({"/metrics", "/health/live", "/health/ready"})


def _untraced(scope: MutableMapping[str, Any]) -> bool:
    """Scrapes and probes, every few seconds: spans for them would bury the requests that matter."""
    return scope.get("path") in _UNTRACED_PATHS


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    serve_once_warm: bool = False,
    tools: Sequence[Tool[Any]] = (),
) -> FastAPI:
    """`serve_once_warm`: the lifespan's start-up ends only once CrewAI and LiteLLM are loaded (WORKERS > 1).
    `tools`: tools registered beside the built-in ones, which config/crewai/agents.yaml may then grant to the
    execution stage (a CrewAI `BaseTool` as `engine.flow.crewai.tools.CrewAITool`: docs/crewai-notes.md)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resources = await open_engine(settings, clock=clock, tools=tools)
        app.state.engine = resources.engine
        if settings.is_demo_model:
            log.warning("no LLM provider key configured: answers come from the OFFLINE DEMO MODEL (demo/agent)")
        else:
            log.info("LLM model", extra={"model": settings.effective_llm_model})
        # Imports CrewAI/LiteLLM in the background: start-up and liveness do not wait for it, readiness does.
        warm_up = resources.engine.runs.ensure_warm()
        resources.engine.runs.start_background()
        gc_pauses = GcPauses()
        gc_pauses.install()
        sampler = asyncio.create_task(
            sample_forever(resources.engine.pool, gc_pauses=gc_pauses), name="metrics-sampler"
        )
        reloads = reload_on_hangup(resources.tools)
        own_port = settings.metrics_port if settings.metrics_enabled else None
        metrics_server = MetricsServer.start(settings.host, own_port) if own_port is not None else None
        try:
            if serve_once_warm:
                # Workers share one listening socket and the kernel hands a connection to any worker that accepts:
                # a warming worker's readiness 503 would reach a probe now and then, and its runs would wait for
                # the imports after a warm worker's 200. A worker that accepts only once warm leaves its
                # connections to the warm ones. (uvicorn starts accepting when this start-up returns.)
                await resources.engine.runs.until_warm()
            yield
        finally:
            reloads.close()
            sampler.cancel()
            gc_pauses.uninstall()
            if metrics_server is not None:
                metrics_server.stop()
            # Drain runs first (they may be waiting for the warm-up), then drop an unfinished warm-up.
            await resources.close()
            warm_up.cancel()

    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from files shipped in that package, not a CDN.
    app = FastAPIOffline(
        title="agent-runtime",
        version="0.1.0",
        description="Runs the social app's AI agent: profiles, sessions, messages, usage and AG-UI runs over SSE.",
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry support gives the HTTP server span (route template, status); it records
        # only when a tracer provider is installed (observability/tracing.py). Metrics are Prometheus'.
        telemetry={"metrics": False, "logs": False, "operation_spans": False, "exclude": _untraced},
    )
    install_error_handlers(app)
    install_openapi(app)
    app.include_router(health.router)
    app.include_router(profile.router)
    app.include_router(sessions.router)
    app.include_router(usage.router)
    app.include_router(memories.router)
    app.include_router(runs.router)
    if settings.metrics_enabled and settings.metrics_port is None:
        app.include_router(metrics.router)
    if settings.playground_on:
        mount_playground(app)
    app.add_middleware(
        RequestContextMiddleware,
        max_body_bytes=settings.max_request_bytes,
        body_timeout_seconds=settings.http_body_timeout_seconds,
        shed=shed_requests(app),
    )
    return app


_MONITORING = re.compile(r"^/health/|^/metrics$")


def shed_requests(app: FastAPI) -> Shedder:
    """Refuses a request to start a run while this process is full or draining, with the admission's own
    429/503, before FastAPI routes, authenticates and validates it, a fraction of the loop's time per refusal
    (docs/benchmarks.md, "Burst of 500"). The run route still takes its slot through the admission: this is
    only the fast no.

    While the process drains, every other request but the health checks and metrics gets the same 503
    `shutting_down`: the listener stays open during a drain (api/server.py) so that a client is told to go
    elsewhere, rather than refused at the socket. Health and metrics still say what they say (readiness: 503
    `shutting_down`), for whoever watches the drain."""
    # The runs router's own routes: it carries the full path (`/v1` prefix) and is included without another.
    starts = [
        route
        for route in runs.router.routes
        if isinstance(route, APIRoute)
        and route.endpoint in runs.RUN_STARTING_ENDPOINTS
        and "POST" in (route.methods or ())
    ]

    def shed(scope: Scope) -> None:
        engine = getattr(app.state, "engine", None)
        if engine is None:
            return
        if engine.runs.admission.draining and not _MONITORING.match(str(scope.get("path", ""))):
            engine.runs.admission.check()  # raises the 503 `shutting_down`
        if scope.get("method") != "POST":
            return
        for route in starts:
            if route.path_regex.match(scope["path"]):
                scope["route"] = route  # the metrics label the router would have set
                engine.runs.admission.check()
                return

    return shed
