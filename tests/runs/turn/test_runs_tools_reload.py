"""An explicit reload of `TOOLS_FILE` (issue 34): SIGHUP makes the running service read the file again. Runs that start
afterwards get the new tools; a run in flight keeps the tools it started with (the same tools array on every call,
its tool still answering); a file that fails changes nothing and the log says why."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from pydantic import SecretStr
from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, execution_done, intent_needs, organized, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall
from tests.support.local_http import logged, serving
from tests.support.serve import poll_until

SECRET = "tool-identity-secret-for-the-tests-0123456789"


@dataclass
class Backend:
    url: str
    # Set when a call reached the gate; the gate answers once `open` is set.
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    open: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def backend() -> AsyncIterator[Backend]:
    app = web.Application()
    state: dict[str, Backend] = {}

    async def gate(request: web.Request) -> web.Response:
        state["b"].entered.set()
        await state["b"].open.wait()
        return web.json_response({"passed": True})

    async def drafts(request: web.Request) -> web.Response:
        return web.json_response({"draft": (await request.json())["text"]}, status=201)

    app.router.add_get("/gate", gate)
    app.router.add_post("/drafts", drafts)
    async with serving(app) as url:
        state["b"] = Backend(url=url)
        yield state["b"]
        state["b"].open.set()


def _gate_tool(backend: Backend) -> dict[str, Any]:
    return {"name": "wait_at_gate", "description": "Waits at the gate.", "method": "GET", "url": f"{backend.url}/gate"}


def _draft_tool(backend: Backend) -> dict[str, Any]:
    return {
        "name": "draft_post",
        "description": "Save a draft post in the user's name.",
        "method": "POST",
        "url": f"{backend.url}/drafts",
        "parameters": {"text": {"type": "string", "description": "The post's text."}},
    }


def _write(path: Path, *tools: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"http": list(tools)}), encoding="utf-8")
    return path


def _calls(call_id: str, name: str, arguments: dict[str, Any]) -> StubReply:
    return StubReply(tool_calls=[StubToolCall(id=call_id, name=name, arguments=json.dumps(arguments))])


async def _offered(h: Harness, user: User) -> list[str]:
    capabilities = (await h.client.get("/v1/agui/capabilities", headers=user.headers)).json()
    return [tool["name"] for tool in capabilities["tools"]["items"]]


async def _draft(h: Harness, user: User, sid: str, text: str) -> Any:
    """One run whose execution stage calls draft_post with `text`: the tool result."""
    h.stub.enqueue(
        intent_needs("Draft a post."),
        _calls("call_draft", "draft_post", {"text": text}),
        execution_done("Drafted.", {}),
        organized("Drafted."),
    )
    result = await h.run(user, sid, "draft a post")
    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    (drafted,) = [json.loads(e["content"]) for e in result.of_type("TOOL_CALL_RESULT")]
    return drafted


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body["tools"]]


async def test_a_reload_gives_later_runs_the_new_tools_while_the_run_in_flight_keeps_its_own(
    make_harness: MakeHarness, make_user: Callable[[], User], backend: Backend, tmp_path: Path
) -> None:
    path = _write(tmp_path / "tools.yaml", _gate_tool(backend))
    async with make_harness(tools_file=path, tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        builtin = [name for name in await _offered(h, user) if name != "wait_at_gate"]
        h.stub.enqueue(
            intent_needs("Pass the gate."),
            _calls("call_gate", "wait_at_gate", {}),
            execution_done("Passed.", {}),
            organized("Passed."),
        )
        in_flight = asyncio.create_task(h.run(user, sid, "pass the gate"))
        async with asyncio.timeout(30):
            await backend.entered.wait()

        _write(path, _draft_tool(backend))
        os.kill(os.getpid(), signal.SIGHUP)
        offered = await poll_until(lambda: _offered(h, user), lambda names: "draft_post" in names, within=10)
        assert offered == [*builtin, "draft_post"]

        backend.open.set()
        first = await in_flight
        assert types(first.events)[-1] == "RUN_FINISHED", first.body
        (passed,) = [json.loads(e["content"]) for e in first.of_type("TOOL_CALL_RESULT")]
        assert passed == {"status": 200, "data": {"passed": True}}, "the replaced tool still served its run"
        run_calls = [r.body for r in h.stub.requests]
        assert [_tool_names(body) for body in run_calls] == [[*builtin, "wait_at_gate"]] * 4

        assert await _draft(h, user, sid, "Picnic!") == {"status": 201, "data": {"draft": "Picnic!"}}
        assert [_tool_names(r.body) for r in h.stub.requests[4:]] == [[*builtin, "draft_post"]] * 4


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("http: [{name: broken}]", "Field required"),
        ("http: [{name: calculator, description: x, method: GET, url: 'http://127.0.0.1:9/'}]", "already registered"),
        ("http: {not: [a list", "while parsing"),
    ],
)
async def test_a_reload_of_a_bad_file_changes_nothing_and_the_log_says_why(
    make_harness: MakeHarness,
    make_user: Callable[[], User],
    backend: Backend,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    content: str,
    problem: str,
) -> None:
    path = _write(tmp_path / "tools.yaml", _draft_tool(backend))
    async with make_harness(tools_file=path, tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        before = await _offered(h, user)
        path.write_text(content, encoding="utf-8")
        with caplog.at_level(logging.ERROR, logger="agent_runtime.engine.tools_reload"):
            os.kill(os.getpid(), signal.SIGHUP)
            record = await logged(caplog, "tools not reloaded: the tools in use stay", within=10)
        assert problem in record.__dict__["error"] and str(path) in record.__dict__["error"]

        assert await _offered(h, user) == before
        assert await _draft(h, user, sid, "Still here") == {"status": 201, "data": {"draft": "Still here"}}
