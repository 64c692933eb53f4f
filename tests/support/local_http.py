"""Small real servers and waits for the tests of tools: an aiohttp app on a free local port, a log line awaited."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from tests.support.serve import poll_until


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` served on 127.0.0.1 at a free port; its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def logged(caplog: pytest.LogCaptureFixture, message: str, *, within: float) -> logging.LogRecord:
    """The one record of `message` that `caplog` captures within `within` seconds."""

    async def records() -> list[logging.LogRecord]:
        await asyncio.sleep(0.05)
        return [r for r in caplog.records if r.getMessage() == message]

    (record,) = await poll_until(records, bool, within=within)
    return record
