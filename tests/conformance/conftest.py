"""The servers the conformance tests drive, started once for every test module here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.conformance.harness import Servers, ensure_client_installed
from tests.support.serve import ServeProcess, free_port, start_serve


@pytest.fixture(scope="session")
def agui_client_version() -> str:
    return ensure_client_installed()


@pytest.fixture(scope="session")
async def servers(
    database_url: str, agui_client_version: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Servers]:
    workdir = tmp_path_factory.mktemp("agui-conformance")
    closed_port = free_port()  # nothing listens there: connection refused
    failing_env = {
        "LLM_MODEL": "deepseek/deepseek-flash",
        "DEEPSEEK_API_KEY": "x",
        "LLM_API_BASE": f"http://127.0.0.1:{closed_port}",
        "LLM_MAX_RETRIES": "0",
    }
    started = await asyncio.gather(
        start_serve("demo", database_url=database_url, workdir=workdir),
        start_serve("failing", database_url=database_url, workdir=workdir, env=failing_env),
        return_exceptions=True,
    )
    running = [s for s in started if isinstance(s, ServeProcess)]
    errors = [e for e in started if isinstance(e, BaseException)]
    try:
        if errors:
            raise errors[0]
        yield Servers(demo=started[0], failing=started[1])  # type: ignore[arg-type]
        await asyncio.gather(*(s.stop() for s in running))
    finally:
        await asyncio.gather(*(s.close() for s in running))
