"""One real `agent-runtime serve` shared by the tests in this directory (real sockets: uvicorn's limits,
schemathesis over HTTP)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit
from uuid import uuid4

import httpx
import jwt
import pytest
from tests.conftest import TEST_JWT_SECRET
from tests.support.serve import ServeProcess, start_serve

# The limits the shared server runs with: short enough for the transport tests to watch them act.
HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
MAX_CONCURRENCY = 40
MAX_HEADER_BYTES = 32_768


def bearer_token() -> str:
    claims = {"sub": str(uuid4()), "exp": int(time.time()) + 3600}
    return jwt.encode(claims, TEST_JWT_SECRET, algorithm="HS256")


def address(server: ServeProcess) -> tuple[str, int]:
    url = urlsplit(server.base_url)
    assert url.hostname is not None and url.port is not None
    return url.hostname, url.port


@pytest.fixture(scope="package")
async def warm_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServeProcess]:
    """One real server for the tests that need sockets (transport limits, schemathesis), started once for this
    directory: each start pays for the CrewAI/LiteLLM warm-up (~15 s of CPU on a busy 2-core machine)."""
    limits = {
        "HTTP_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "HTTP_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "HTTP_MAX_CONCURRENCY": str(MAX_CONCURRENCY),
        "MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "LOG_LEVEL": "WARNING",
    }
    server = await start_serve(
        "limits", database_url=database_url, workdir=tmp_path_factory.mktemp("serve"), env=limits
    )
    try:
        # Readiness waited for the background warm-up (imports of a few hundred MB, and a thread holding the GIL
        # for seconds, which delays the loop's timers); one demo run also pays what a first run still loads.
        headers = {"Authorization": f"Bearer {bearer_token()}"}
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120, headers=headers) as client:
            session = (await client.post("/v1/sessions")).json()["id"]
            run = await client.post(f"/v1/sessions/{session}/runs", json={"message": "hi"})
            assert "RUN_FINISHED" in run.text, run.text[-500:]
        yield server
        assert await server.stop() == 0, server.log_tail()
    finally:
        await server.close()
