"""The servers the conformance tests drive, started once for every test module here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.conformance.harness import Server, Servers, _free_port, _start_server, _stop_server, ensure_client_installed


@pytest.fixture(scope="session")
def agui_client_version() -> str:
    return ensure_client_installed()


@pytest.fixture(scope="session")
async def servers(
    database_url: str, agui_client_version: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Servers]:
    workdir = tmp_path_factory.mktemp("agui-conformance")
    closed_port = _free_port()  # nothing listens there: connection refused
    failing_env = {
        "LLM_MODEL": "deepseek/deepseek-chat",
        "DEEPSEEK_API_KEY": "x",
        "LLM_API_BASE": f"http://127.0.0.1:{closed_port}",
        "LLM_MAX_RETRIES": "0",
    }
    started = await asyncio.gather(
        _start_server("demo", database_url, workdir, {}),
        _start_server("failing", database_url, workdir, failing_env),
        return_exceptions=True,
    )
    running = [s for s in started if isinstance(s, Server)]
    errors = [e for e in started if isinstance(e, BaseException)]
    if errors:
        for server in running:
            await _stop_server(server)
        raise errors[0]
    yield Servers(demo=started[0], failing=started[1])  # type: ignore[arg-type]
    await asyncio.gather(*(_stop_server(s) for s in running))
