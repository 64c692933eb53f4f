"""One real `agent-runtime serve` shared by the tests in this directory (real sockets: uvicorn's limits,
schemathesis over HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from tests.support.server import RunningServer, bearer_token, running_server

# The limits the shared server runs with: short enough for the transport tests to watch them act.
HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
MAX_CONCURRENCY = 40
MAX_HEADER_BYTES = 32_768


@pytest.fixture(scope="package")
async def warm_server(database_url: str) -> AsyncIterator[RunningServer]:
    """One real server for the tests that need sockets (transport limits, schemathesis), started once for this
    directory: each start pays for the CrewAI/LiteLLM warm-up (~15 s of CPU on a busy 2-core machine)."""
    limits = {
        "HTTP_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "HTTP_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "HTTP_MAX_CONCURRENCY": str(MAX_CONCURRENCY),
        "MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "LOG_LEVEL": "WARNING",
    }
    async with running_server(database_url, **limits) as running:
        # Wait for the background warm-up (imports of a few hundred MB, and a thread holding the GIL for
        # seconds, which delays the loop's timers): a demo run waits for it to finish.
        headers = {"Authorization": f"Bearer {bearer_token()}"}
        async with httpx.AsyncClient(base_url=running.base_url, timeout=120, headers=headers) as client:
            session = (await client.post("/v1/sessions")).json()["id"]
            run = await client.post(f"/v1/sessions/{session}/runs", json={"message": "hi"})
            assert "RUN_FINISHED" in run.text, run.text[-500:]
        yield running
