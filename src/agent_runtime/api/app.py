"""The FastAPI application: routes, error handlers, middleware and the engine's lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from agent_runtime.api.errors import install_error_handlers
from agent_runtime.api.middleware import RequestContextMiddleware
from agent_runtime.api.routes import health, profile, runs, sessions, usage
from agent_runtime.engine.runtime import open_engine
from agent_runtime.settings import Settings, get_settings

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resources = await open_engine(settings)
        app.state.engine = resources.engine
        if settings.is_demo_model:
            log.warning("no LLM provider key configured: answers come from the OFFLINE DEMO MODEL (demo/agent)")
        else:
            log.info("LLM model", extra={"model": settings.effective_llm_model})
        # Imports CrewAI/LiteLLM in the background: start-up and health checks do not wait for it.
        warm_up = resources.engine.runs.ensure_warm()
        resources.engine.runs.start_background()
        try:
            yield
        finally:
            # Drain runs first (they may be waiting for the warm-up), then drop an unfinished warm-up.
            await resources.close()
            warm_up.cancel()

    app = FastAPI(
        title="agent-runtime",
        version="0.1.0",
        description="Runs the social app's AI agent: profiles, sessions, messages, usage and AG-UI runs over SSE.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(profile.router)
    app.include_router(sessions.router)
    app.include_router(usage.router)
    app.include_router(runs.router)
    app.add_middleware(
        RequestContextMiddleware,
        max_body_bytes=settings.max_request_bytes,
        body_timeout_seconds=settings.http_body_timeout_seconds,
    )
    return app
