"""MCP servers from `TOOLS_FILE` (issue 34): the SDK's own server (tests/support/mcp_server.py) over streamable HTTP
and over stdio, its allowed tools offered with the schemas it listed at start-up and called with who asks in `_meta`
(checked by the server), failures as tool results, approvals as interrupts, and servers that cannot be used refused
at start-up; a reload (SIGHUP) lists a server's tools again, and one down then changes nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml
from pydantic import SecretStr
from sse_starlette.sse import AppStatus
from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, execution_done, intent_needs, organized, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall
from tests.support import mcp_server
from tests.support.local_http import logged
from tests.support.serve import poll_until

from agent_runtime.engine.flow.templates import TemplateConfigError
from agent_runtime.engine.flow.tools.identity import IdentitySigner
from agent_runtime.engine.flow.tools.tools_file import ConfiguredTools, ToolsConfigError, load_tools_file
from agent_runtime.engine.runtime import load_config
from agent_runtime.settings import Settings

SECRET = "mcp-identity-secret-for-the-tests-0123456789"
ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class HttpMcpServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # sse-starlette (under FastMCP) ends every stream once any uvicorn server in the process handled an exit
        # (its global flag, set by the signal tests): this server is a new one.
        AppStatus.should_exit = False
        config = uvicorn.Config(
            mcp_server.app(), host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        server = self._server

        async def started() -> bool:
            return server.started

        await poll_until(started, bool, within=10)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
            self._server = self._task = None


@pytest.fixture
def identity_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(mcp_server.SECRET_ENV, SECRET)
    return SECRET


@pytest.fixture
async def http_server(identity_secret: str) -> AsyncIterator[HttpMcpServer]:
    server = HttpMcpServer()
    await server.start()
    yield server
    await server.stop()


def _server(transport: str, url: str, *tools: dict[str, Any], **extra: Any) -> dict[str, Any]:
    reach: dict[str, Any] = (
        {"url": url}
        if transport == "http"
        else {
            "command": [sys.executable, "-m", "tests.support.mcp_server"],
            "env": {mcp_server.SECRET_ENV: "${" + mcp_server.SECRET_ENV + "}", "PYTHONPATH": str(ROOT)},
        }
    )
    return {"name": "social", **reach, "tools": list(tools), **extra}


def _tools_file(tmp_path: Path, *servers: dict[str, Any]) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"mcp": list(servers)}), encoding="utf-8")
    return path


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> StubReply:
    return StubReply(tool_calls=[StubToolCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls])


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_an_mcp_servers_allowed_tool_is_offered_and_called_with_who_asks(
    make_harness: MakeHarness,
    make_user: Callable[[], User],
    http_server: HttpMcpServer,
    tmp_path: Path,
    transport: str,
) -> None:
    tools_file = _tools_file(tmp_path, _server(transport, http_server.url, {"name": "friends_events"}))
    async with make_harness(tools_file=tools_file, tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        h.stub.enqueue(
            intent_needs("Find the friends' events."),
            _calls(("call_ev", "friends_events", {"from_date": "2026-12-05"})),
            execution_done("A picnic.", {"events": 1}),
            organized("Your friends go to a picnic."),
        )
        result = await h.run(user, sid, "what are my friends doing?")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        offered = [tool["function"] for tool in h.stub.requests[1].body["tools"]]
        assert [tool["name"] for tool in offered][-1] == "friends_events"
        assert "delete_everything" not in [tool["name"] for tool in offered], "not on the allow-list"
        schema = offered[-1]["parameters"]
        assert (schema["required"], schema["properties"]["from_date"]["type"]) == (["from_date"], "string")
        (content,) = [e["content"] for e in result.of_type("TOOL_CALL_RESULT")]
        answer = {"events": ["Picnic on 2026-12-05"], "for": str(user.ctx.user_id), "session": sid}
        assert json.loads(content) == {"content": [json.dumps(answer, indent=2)], "structured": answer}
        capabilities = (await h.client.get("/v1/agui/capabilities", headers=user.headers)).json()
        listed = {tool["name"]: tool for tool in capabilities["tools"]["items"]}
        assert listed["friends_events"]["parameters"] == schema


async def test_a_failing_oversized_slow_or_vanished_mcp_server_is_a_tool_result_and_the_run_goes_on(
    make_harness: MakeHarness, make_user: Callable[[], User], http_server: HttpMcpServer, tmp_path: Path
) -> None:
    allowed = [{"name": name} for name in ("broken", "chatty", "sluggish", "friends_events")]
    server = _server("http", http_server.url, *allowed, timeout_seconds=0.5, max_result_bytes=1000)
    async with make_harness(tools_file=_tools_file(tmp_path, server), tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        h.stub.enqueue(
            intent_needs("Ask the backend."),
            _calls(("call_b", "broken", {}), ("call_c", "chatty", {}), ("call_s", "sluggish", {})),
            execution_done("It failed.", {}),
            organized("The backend is not answering."),
        )
        result = await h.run(user, sid, "ask the backend")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        errors = {e["toolCallId"]: json.loads(e["content"])["error"] for e in result.of_type("TOOL_CALL_RESULT")}
        assert errors == {
            "call_b": "broken: Error executing tool broken: the events database is down",
            "call_c": "chatty: the answer is larger than 1000 bytes",
            "call_s": "sluggish: the MCP server 'social' failed: Timed out while waiting for response to "
            "ClientRequest. Waited 0.45 seconds.",
        }

        # The server goes away: a tool result says so, and the run goes on; once it is back, calls work again.
        await http_server.stop()
        assert json.loads(await _ask_friends(h, user, sid))["error"].startswith("friends_events: the MCP server")
        await http_server.start()

        async def ask() -> dict[str, Any]:
            answer: dict[str, Any] = json.loads(await _ask_friends(h, user, sid))
            return answer

        back = await poll_until(ask, lambda answer: "structured" in answer, within=15)
        assert back["structured"]["for"] == str(user.ctx.user_id)


async def _ask_friends(h: Harness, user: User, sid: str, tool: str = "friends_events") -> str:
    """One run whose execution stage calls `tool`; the tool result's content."""
    h.stub.enqueue(
        intent_needs("Find the friends' events."),
        _calls(("call_ev", tool, {"from_date": "2026-12-05"} if tool == "friends_events" else {})),
        execution_done("Done.", {}),
        organized("Done."),
    )
    result = await h.run(user, sid, "and my friends?")
    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    (content,) = [e["content"] for e in result.of_type("TOOL_CALL_RESULT")]
    return str(content)


async def test_a_stdio_server_that_crashed_is_started_again_behind_the_call_that_found_it_gone(
    make_harness: MakeHarness, make_user: Callable[[], User], identity_secret: str, tmp_path: Path
) -> None:
    server = _server("stdio", "", {"name": "crash"}, {"name": "friends_events"}, timeout_seconds=2)
    async with make_harness(tools_file=_tools_file(tmp_path, server), tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        crashed = json.loads(await _ask_friends(h, user, sid, tool="crash"))
        assert crashed["error"].startswith("crash: the MCP server 'social' failed"), crashed

        async def ask() -> dict[str, Any]:
            answer: dict[str, Any] = json.loads(await _ask_friends(h, user, sid))
            return answer

        back = await poll_until(ask, lambda answer: "structured" in answer, within=20)
        assert back["structured"]["for"] == str(user.ctx.user_id)


async def test_an_mcp_tool_that_needs_approval_ends_the_run_as_an_interrupt(
    make_harness: MakeHarness, make_user: Callable[[], User], http_server: HttpMcpServer, tmp_path: Path
) -> None:
    server = _server("http", http_server.url, {"name": "friends_events", "requires_approval": True})
    async with make_harness(tools_file=_tools_file(tmp_path, server), tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        turn = [{"id": "u-1", "role": "user", "content": "what are my friends doing?"}]
        agui = {"threadId": sid, "runId": "r", "messages": turn, "state": {}, "tools": [], "context": []}
        h.stub.enqueue(
            intent_needs("Find the friends' events."),
            _calls(("call_ev", "friends_events", {"from_date": "2026-12-05"})),
        )
        stopped = await h.agui(user, agui)
        (interrupt,) = stopped.events[-1]["outcome"]["interrupts"]
        assert interrupt["id"] == "approve-call_ev"

        h.stub.enqueue(execution_done("A picnic.", {}), organized("A picnic."))
        resume = [{"interruptId": "approve-call_ev", "status": "resolved"}]
        resumed = await h.agui(user, {**agui, "runId": "r2", "resume": resume})

        (content,) = [json.loads(e["content"]) for e in resumed.of_type("TOOL_CALL_RESULT")]
        assert content["structured"]["for"] == str(user.ctx.user_id)


async def test_an_mcp_server_that_cannot_be_used_stops_start_up(
    http_server: HttpMcpServer, tmp_path: Path, identity_secret: str
) -> None:
    unreachable = _server(
        "http", f"http://127.0.0.1:{_free_port()}/mcp", {"name": "friends_events"}, connect_timeout_seconds=1
    )
    with pytest.raises(TemplateConfigError, match="MCP server 'social' did not answer when connecting"):
        await ConfiguredTools.open(load_tools_file(_tools_file(tmp_path, unreachable)), IdentitySigner(identity_secret))
    lacking = _server("http", http_server.url, {"name": "no_such_tool"})
    with pytest.raises(TemplateConfigError, match=r"MCP server 'social' has no tools \['no_such_tool'\]"):
        await ConfiguredTools.open(load_tools_file(_tools_file(tmp_path, lacking)), IdentitySigner(identity_secret))


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({"name": "s", "url": "http://127.0.0.1:9/mcp", "command": ["x"], "tools": [{"name": "t"}]}, "exactly one"),
        ({"name": "s", "tools": [{"name": "t"}]}, "exactly one"),
        ({"name": "s", "command": ["x"], "headers": {"A": "b"}, "tools": [{"name": "t"}]}, "headers are for"),
        ({"name": "s", "url": "http://127.0.0.1:9/mcp", "tools": []}, "tools"),
        ({"name": "s", "url": "http://127.0.0.1:9/mcp", "tools": [{"name": "calculator"}]}, "already registered"),
    ],
)
def test_a_bad_mcp_server_entry_stops_start_up_with_what_is_wrong(
    settings: Settings, tmp_path: Path, server: dict[str, Any], problem: str
) -> None:
    configured = settings.model_copy(
        update={"tools_file": _tools_file(tmp_path, server), "tool_identity_secret": SecretStr(SECRET)}
    )
    with pytest.raises(ToolsConfigError, match=problem):
        load_config(configured)


def test_a_service_without_mcp_servers_never_imports_the_mcp_sdk() -> None:
    # Importing it patches uvicorn's Server.handle_exit (through sse-starlette): only where a server is configured.
    code = (
        "import sys\n"
        "import agent_runtime.api.app, agent_runtime.engine.runtime, agent_runtime.engine.flow.tools.tools_file\n"
        "from uvicorn.server import Server\n"
        "assert 'mcp' not in sys.modules and 'sse_starlette' not in sys.modules, 'imported'\n"
        "assert Server.handle_exit.__module__ == 'uvicorn.server', Server.handle_exit.__module__\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


async def test_a_reload_lists_the_servers_tools_again_and_a_server_down_changes_nothing(
    make_harness: MakeHarness,
    make_user: Callable[[], User],
    http_server: HttpMcpServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = _tools_file(tmp_path, _server("http", http_server.url, {"name": "friends_events"}))
    async with make_harness(tools_file=path, tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)

        async def offered() -> list[str]:
            capabilities = (await h.client.get("/v1/agui/capabilities", headers=user.headers)).json()
            return [tool["name"] for tool in capabilities["tools"]["items"]]

        _tools_file(tmp_path, _server("http", http_server.url, {"name": "friends_events"}, {"name": "broken"}))
        os.kill(os.getpid(), signal.SIGHUP)
        now = await poll_until(offered, lambda names: "broken" in names, within=15)
        assert now[-2:] == ["friends_events", "broken"]
        broken = json.loads(await _ask_friends(h, user, sid, tool="broken"))
        assert broken["error"].startswith("broken: "), broken

        down = _server("http", f"http://127.0.0.1:{_free_port()}/mcp", {"name": "chatty"}, connect_timeout_seconds=1)
        _tools_file(tmp_path, down)
        with caplog.at_level(logging.ERROR, logger="agent_runtime.engine.tools_reload"):
            os.kill(os.getpid(), signal.SIGHUP)
            record = await logged(caplog, "tools not reloaded: the tools in use stay", within=15)
        assert "MCP server 'social' did not answer when connecting" in record.__dict__["error"]
        assert await offered() == now
        friends = json.loads(await _ask_friends(h, user, sid))
        assert friends["structured"]["for"] == str(user.ctx.user_id)
