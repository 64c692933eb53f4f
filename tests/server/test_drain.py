"""A drain against a real `agent-runtime serve`: after SIGTERM, while a run is still in flight, the port still
answers, and every new request (a new connection, or the next one on a kept-alive connection) gets the JSON
503 `shutting_down` with `Retry-After` and a closed connection; the run in flight finishes, and the server
exits 0 once it has."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
from tests.conftest import User
from tests.runs.conftest import STUB_API_KEY, intent_direct, parse_sse, stage_request_text
from tests.server.conftest import address
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply
from tests.support.serve import ServeProcess, start_serve

from agent_runtime.settings import Settings

SLOW = "[slow]"
# Long enough for the test to send its requests during the drain, well within the grace.
RUN_SECONDS = 4.0


def respond(request: RecordedRequest) -> StubReply:
    slow = stage_request_text(request).startswith(SLOW)
    return intent_direct("done", delay_seconds=RUN_SECONDS if slow else 0)


@pytest.fixture
async def stub() -> AsyncIterator[DeepSeekStub]:
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=respond) as stub:
        yield stub


@pytest.fixture
async def server(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, stub: DeepSeekStub, settings: Settings
) -> AsyncIterator[ServeProcess]:
    env = {
        "LLM_MODEL": "deepseek/deepseek-flash",
        "LLM_API_BASE": stub.base_url,
        "DEEPSEEK_API_KEY": STUB_API_KEY,
        "SHUTDOWN_GRACE_SECONDS": "30",
        "LOG_LEVEL": "WARNING",
    }
    server = await start_serve("drain", database_url=database_url, workdir=tmp_path_factory.mktemp("drain"), env=env)
    try:
        user = User(settings)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120, headers=user.headers) as client:
            session = (await client.post("/v1/sessions")).json()["id"]
            run = await client.post(f"/v1/sessions/{session}/runs", json={"message": "warm-up"})
            assert parse_sse(run.text)[-1]["type"] == "RUN_FINISHED", run.text[-500:]
        yield server
    finally:
        await server.close()


def _assert_shutting_down(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "shutting_down"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["connection"] == "close"


async def test_new_requests_during_a_drain_get_503_shutting_down_and_the_run_in_flight_finishes(
    server: ServeProcess, stub: DeepSeekStub, settings: Settings
) -> None:
    user = User(settings)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60, headers=user.headers) as client:
        session = (await client.post("/v1/sessions")).json()["id"]
        kept_alive = await asyncio.open_connection(*address(server))  # connected before the signal
        seen = len(stub.requests)
        run = asyncio.create_task(client.post(f"/v1/sessions/{session}/runs", json={"message": f"{SLOW} deploy"}))
        async with asyncio.timeout(60):
            await stub.wait_for_requests(seen + 1)
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)  # uvicorn's main loop sees the signal within 0.1 s

        # New connections, while the run is still in flight.
        async with httpx.AsyncClient(base_url=server.base_url, timeout=5, headers=user.headers) as fresh:
            _assert_shutting_down(await fresh.get("/v1/sessions"))
            _assert_shutting_down(await fresh.post("/v1/sessions"))
            _assert_shutting_down(await fresh.post(f"/v1/sessions/{session}/runs", json={"message": "more"}))
            ready = await fresh.get("/health/ready")
            assert (ready.status_code, ready.json()["error"]["code"]) == (503, "shutting_down")
        # A connection opened before the signal: its next request is refused the same way.
        reader, writer = kept_alive
        writer.write(
            b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: " + user.headers["Authorization"].encode()
        )
        writer.write(b"\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 5)  # to the close
        writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head.lower(), raw[:300]
        assert json.loads(body)["error"]["code"] == "shutting_down"
        assert not run.done()

        response = await run
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED", response.text[-500:]
    assert await server.stop() == 0, server.log_tail()
    with pytest.raises(httpx.ConnectError):  # the listener is closed once the drain is over
        async with httpx.AsyncClient(base_url=server.base_url, timeout=2) as after:
            await after.get("/health/live")
