"""FastAPI dependencies: the engine and the authenticated caller.

All `async def`, though none awaits: FastAPI runs a plain `def` dependency in anyio's worker threads, two thread
hops per request that compete for the GIL with the runs' CrewAI threads: under a burst of requests that made
even a 429 take seconds (docs/benchmarks.md, "Load"). The work here is a dict lookup and one HS256
verification, cheap enough for the loop."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agent_runtime.engine.auth import authenticate
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.pagination import DEFAULT_LIMIT, PageParams
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.text import ClientText

MAX_PAGE_LIMIT = 100
_bearer = HTTPBearer(auto_error=False, description="HS256 JWT whose `sub` is your user UUID (`agent-runtime token`).")


async def get_engine(request: Request) -> RuntimeEngine:
    engine: RuntimeEngine = request.app.state.engine
    return engine


def _caller(request: Request, credentials: HTTPAuthorizationCredentials | None) -> RequestContext:
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else request.headers.get("authorization")
    engine: RuntimeEngine = request.app.state.engine
    return authenticate(engine.settings, header)


async def get_context(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]
) -> RequestContext:
    return _caller(request, credentials)


async def get_stream_context(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    access_token: Annotated[
        ClientText | None,
        Query(
            max_length=4096,
            description="The bearer token, for a browser `EventSource` (it cannot send headers). It ends up in "
            "proxies' access logs: prefer the header, and short-lived tokens here.",
        ),
    ] = None,
) -> RequestContext:
    """The caller of an event stream: the Authorization header, or `?access_token=` when there is none."""
    if credentials is None and request.headers.get("authorization") is None and access_token:
        engine: RuntimeEngine = request.app.state.engine
        return authenticate(engine.settings, f"Bearer {access_token}")
    return _caller(request, credentials)


async def get_page(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_LIMIT, description="Page size (1-100).")] = DEFAULT_LIMIT,
    offset: Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip.")] = 0,
) -> PageParams:
    return PageParams(limit=limit, offset=offset)


Engine = Annotated[RuntimeEngine, Depends(get_engine)]
Caller = Annotated[RequestContext, Depends(get_context)]
StreamCaller = Annotated[RequestContext, Depends(get_stream_context)]
Paging = Annotated[PageParams, Depends(get_page)]
