"""A client that drops the SSE connection mid-run does not stop the run: the answer is still stored.

httpx's ASGITransport only returns a response once the app has sent all of it, so it cannot drop a stream
early: these tests serve the app with a real uvicorn server on a free local port.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from tests.conftest import User
from tests.runs.conftest import Harness, intent_direct, warm_up

ANSWER = "This answer is streamed slowly, chunk by chunk, to a client that is no longer listening."


@asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[str]:
    """Serve an app whose lifespan already ran (the harness's) over HTTP; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started:
                break
            assert not task.done(), task
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("uvicorn did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()


async def _wait_until_not_running(h: Harness, user: User, sid: str) -> dict[str, object]:
    for _ in range(500):
        session = await h.session(user, sid)
        if session["status"] != "running":
            return session
        await asyncio.sleep(0.02)
    raise AssertionError("the run stayed running")


async def test_run_completes_and_is_stored_after_the_client_disconnects(
    h: Harness, make_user: Callable[[], User], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    user = make_user()
    sid = await h.new_session(user)
    await warm_up(h, make_user())  # CrewAI loaded: the run below is going on because the model is held only
    hold = h.stub.hold_replies()
    h.stub.enqueue(intent_direct(ANSWER, chunk_chars=4))

    async with served(h.app) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
            request = http.stream("POST", f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi"})
            async with request as response:
                assert response.status_code == 200
                run_id = response.headers["x-run-id"]
                lines = response.aiter_lines()
                first = [await anext(lines), await anext(lines)]
                assert first == [
                    f"id: {run_id}:1",
                    f'data: {{"type":"RUN_STARTED","threadId":"{sid}","runId":"{run_id}","protocolVersion":"1.0"}}',
                ]
                async with asyncio.timeout(30):
                    await h.stub.wait_for_requests(2)  # the warm-up run's and this run's
            # The response (and with the client, the connection) is closed; the model has not answered yet.
        assert (await h.session(user, sid))["status"] == "running"
        await hold.release()  # now the model writes its whole answer, chunk by chunk, to nobody

        session = await _wait_until_not_running(h, user, sid)

    assert (session["status"], session["error_id"]) == ("completed", None)
    visible = await h.visible(user, sid)
    assert [(m["seq"], m["role"], m["content"]) for m in visible] == [(1, "user", "hi"), (2, "assistant", ANSWER)]
    assert visible[1]["metadata"]["run_id"] == run_id
    assert len(h.stub.requests) == 2
    # Our own loggers only: the stub (aiohttp) and the libraries may log about the dropped connection. And this
    # session's: the sweep is the system's, and may fail other tests' runs whose process is gone meanwhile.
    ours = [r for r in caplog.records if r.name == "agent_runtime" or r.name.startswith("agent_runtime.")]
    errors = [r for r in ours if r.levelno >= logging.ERROR and getattr(r, "session_id", sid) == sid]
    assert [r.getMessage() for r in errors] == []
