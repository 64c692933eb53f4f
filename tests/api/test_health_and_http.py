from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from fastapi import FastAPI
from tests.conftest import User
from tests.support.errors import error_body

from agent_runtime.api.app import create_app
from agent_runtime.engine.flow.crewai import env as crewai_env
from agent_runtime.settings import Settings


async def test_live(client: httpx.AsyncClient) -> None:
    response = await client.get("/health/live")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_ready_checks_database(app: FastAPI, client: httpx.AsyncClient) -> None:
    await app.state.engine.runs.ensure_warm()
    response = await client.get("/health/ready")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "demo_model": True,
        "runs_in_flight": 0,
        "max_concurrent_runs": 64,
    }


@dataclass
class Served:
    app: FastAPI
    client: httpx.AsyncClient


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Served]:
    """An app of its own (its own warm-up), started and stopped around the block."""
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Served(application, client)


async def test_ready_is_503_warming_up_until_crewai_and_litellm_are_loaded_live_is_200_all_along(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    load: Callable[[Path], ModuleType] = crewai_env.load_crewai

    def held(data_dir: Path) -> ModuleType:
        release.wait(60)  # on the warm-up's own thread
        return load(data_dir)

    monkeypatch.setattr(crewai_env, "load_crewai", held)
    async with serving(settings) as served:
        warming, live = await served.client.get("/health/ready"), await served.client.get("/health/live")
        release.set()
        await served.app.state.engine.runs.ensure_warm()
        ready = await served.client.get("/health/ready")
    assert (warming.status_code, warming.json()) == (
        503,
        error_body(warming, "warming_up", "CrewAI and LiteLLM are still loading; retry shortly"),
    )
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()["status"]) == (200, "ok")


async def test_ready_says_warm_up_failed_when_the_imports_failed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(data_dir: Path) -> ModuleType:
        raise ImportError("crewai is broken")

    monkeypatch.setattr(crewai_env, "load_crewai", broken)
    async with serving(settings) as served:
        with pytest.raises(ImportError):
            await served.app.state.engine.runs.ensure_warm()
        ready = await served.client.get("/health/ready")
    assert (ready.status_code, ready.json()) == (
        503,
        error_body(ready, "warm_up_failed", "loading CrewAI and LiteLLM failed: no run can start (see the log)"),
    )
    failures = [r for r in caplog.records if r.getMessage() == "warm-up failed: no run can start"]
    assert len(failures) == 1 and failures[0].exc_info is not None


async def test_unknown_route_is_json_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/nope", headers={"X-Request-ID": "req-123"})
    assert response.status_code == 404
    assert response.headers["x-request-id"] == "req-123"
    assert response.json() == {
        "error": {"code": "not_found", "message": "Not Found", "details": [], "request_id": "req-123", "error_id": None}
    }


async def test_method_not_allowed_is_json(client: httpx.AsyncClient) -> None:
    response = await client.put("/health/live")
    assert (response.status_code, response.headers["allow"]) == (405, "GET, HEAD")
    assert response.json() == error_body(response, "method_not_allowed", "Method Not Allowed")


async def test_request_id_generated_when_absent_or_invalid(client: httpx.AsyncClient) -> None:
    first = await client.get("/health/live")
    second = await client.get("/health/live", headers={"X-Request-ID": "bad id with spaces"})
    assert len(first.headers["x-request-id"]) == 32
    assert second.headers["x-request-id"] != "bad id with spaces"
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


async def test_body_over_limit_is_413(client: httpx.AsyncClient, user: User) -> None:
    big = {"username": "x", "bio": "y" * 2_000_000}
    response = await client.put("/v1/profile", json=big, headers=user.headers)
    assert (response.status_code, response.json()) == (
        413,
        error_body(response, "payload_too_large", "request body exceeds 1048576 bytes"),
    )


async def test_chunked_body_over_limit_is_413(client: httpx.AsyncClient, user: User) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b"x" * 65_536

    response = await client.put(
        "/v1/profile", content=chunks(), headers={**user.headers, "content-type": "application/json"}
    )
    assert (response.status_code, response.json()) == (
        413,
        error_body(response, "payload_too_large", "request body exceeds 1048576 bytes"),
    )


async def test_malformed_json_is_422_naming_body(client: httpx.AsyncClient, user: User) -> None:
    response = await client.put(
        "/v1/profile", content=b"{not json", headers={**user.headers, "content-type": "application/json"}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["loc"][0] == "body"


async def test_openapi_documents_models_and_errors(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for name in ("ErrorResponse", "Session", "Profile", "StoredMessage", "ProfileUpdate"):
        assert name in schemas
    get_session = spec["paths"]["/v1/sessions/{session_id}"]["get"]["responses"]
    for status in ("401", "404", "422"):
        assert get_session[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"
        }
    assert "HTTPValidationError" not in schemas
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


async def test_with_serve_once_warm_the_start_up_ends_once_warm_or_once_a_drain_begins(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WORKERS > 1: a worker accepts connections (uvicorn: once the lifespan's start-up returned) only warm."""
    release = threading.Event()
    load: Callable[[Path], ModuleType] = crewai_env.load_crewai
    loop = asyncio.get_running_loop()
    reached: asyncio.Queue[None] = asyncio.Queue()

    def held(data_dir: Path) -> ModuleType:
        loop.call_soon_threadsafe(reached.put_nowait, None)  # the start-up now waits for it
        release.wait(60)
        return load(data_dir)

    monkeypatch.setattr(crewai_env, "load_crewai", held)

    async def serve(application: FastAPI, started: asyncio.Event, stop: asyncio.Event) -> None:
        async with application.router.lifespan_context(application):
            started.set()
            await stop.wait()

    async def starting(application: FastAPI) -> asyncio.Event:
        started, stop = asyncio.Event(), asyncio.Event()
        stops.append(stop)
        tasks.append(asyncio.create_task(serve(application, started, stop)))
        await asyncio.wait_for(reached.get(), 30)
        return started

    tasks: list[asyncio.Task[None]] = []
    stops: list[asyncio.Event] = []
    try:
        warming, draining = create_app(settings, serve_once_warm=True), create_app(settings, serve_once_warm=True)
        warming_started, draining_started = await starting(warming), await starting(draining)
        assert not warming_started.is_set() and not draining_started.is_set()
        draining.state.engine.runs.request_drain()  # a SIGTERM during the warm-up: the stop need not wait for it
        await asyncio.wait_for(draining_started.wait(), 10)
        assert not warming_started.is_set()
        release.set()
        await asyncio.wait_for(warming_started.wait(), 30)
    finally:
        release.set()
        for stop in stops:
            stop.set()
        await asyncio.gather(*tasks)
