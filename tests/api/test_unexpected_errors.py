"""An unexpected exception in a route: the JSON 500 with the request id and an error_id, both also in the log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import asyncpg
import httpx
import pytest

from agent_runtime.api.app import create_app
from agent_runtime.logging_setup import JsonFormatter
from agent_runtime.settings import Settings


class _Lines(logging.Handler):
    """Formats records as they are emitted, while the request's context (its request id) is still set."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def error_lines() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("agent_runtime.api.errors")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_unexpected_exception_is_a_json_500_traceable_by_request_and_error_id(
    settings: Settings, error_lines: _Lines
) -> None:
    app = create_app(settings)

    async def boom() -> None:
        raise RuntimeError("secret internals")

    app.add_api_route("/boom", boom)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.get("/boom", headers={"X-Request-ID": "req-500-test"})

    assert response.status_code == 500
    assert response.headers["x-request-id"] == "req-500-test"
    body = response.json()
    error_id = body["error"]["error_id"]
    assert body == {
        "error": {
            "code": "internal_error",
            "message": "internal server error",
            "details": [],
            "request_id": "req-500-test",
            "error_id": error_id,
        }
    }
    assert isinstance(error_id, str) and len(error_id) == 32
    (line,) = error_lines.lines
    assert (line["msg"], line["level"], line["request_id"], line["error_id"]) == (
        "unhandled error",
        "ERROR",
        "req-500-test",
        error_id,
    )
    assert "RuntimeError: secret internals" in str(line["exc"])
    assert "secret internals" not in response.text


@pytest.mark.parametrize(
    "lost",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.InterfaceError("cannot call Connection.fetch(): connection is closed"),
    ],
)
async def test_a_lost_database_connection_outside_the_pool_is_503_database_unavailable_not_500(
    settings: Settings, lost: Exception
) -> None:
    app = create_app(settings)

    async def query() -> None:
        # As a library would: the lost connection wrapped in an error of its own.
        raise RuntimeError("lookup failed") from lost

    async def timeout() -> None:
        raise TimeoutError  # not the database's: stays a 500

    app.add_api_route("/query", query)
    app.add_api_route("/timeout", timeout)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.get("/query")
        unrelated = await client.get("/timeout")

    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.headers["retry-after"] == "2"
    assert unrelated.status_code == 500
