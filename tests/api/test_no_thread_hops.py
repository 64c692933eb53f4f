"""Every route and dependency runs on the event loop: FastAPI would run a plain `def` one in anyio's worker
threads, two thread hops per request competing for the GIL with the runs' CrewAI threads (a 429 took 2.6 s
in a burst of 500 requests that way; docs/threads.md)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from agent_runtime.api.routes import health, metrics, profile, runs, sessions, usage


def _calls(dependant: Dependant) -> Iterator[Any]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def _runs_on_the_loop(call: Any) -> bool:
    # Functions, or instances (FastAPI's security schemes) whose __call__ is a coroutine function.
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)


def test_no_route_or_dependency_runs_in_a_worker_thread() -> None:
    routers = (health.router, metrics.router, profile.router, runs.router, sessions.router, usage.router)
    routes = [route for router in routers for route in router.routes if isinstance(route, APIRoute)]
    offenders = sorted(
        f"{route.path}: {getattr(call, '__qualname__', type(call).__qualname__)}"
        for route in routes
        for call in _calls(route.dependant)
        if not _runs_on_the_loop(call)
    )
    assert len(routes) > 15
    assert offenders == []
