"""Tools a product team plugs in without forking (issue 34): HTTP endpoints from `TOOLS_FILE`, offered to the execution
stage, called by a real aiohttp server here with who asks in a signed header it verifies, failures as tool results,
approvals as interrupts, and a bad tools file refused at start-up."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from aiohttp import web
from pydantic import SecretStr
from tests.conftest import User
from tests.runs.conftest import MakeHarness, execution_done, intent_direct, intent_needs, organized, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall
from tests.stubs.prefix_cache import serialise
from tests.support.local_http import serving

from agent_runtime.engine.flow.tools.tools_file import ToolsConfigError
from agent_runtime.engine.runtime import load_config
from agent_runtime.settings import Settings

SECRET = "tool-identity-secret-for-the-tests-0123456789"


@dataclass
class Backend:
    """The app's backend, as a tool server: it checks who asks and answers."""

    url: str
    claims: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0


def _who_asks(request: web.Request, backend: Backend, tool: str) -> dict[str, Any] | None:
    try:
        claims: dict[str, Any] = jwt.decode(
            request.headers["X-Agent-Identity"], SECRET, algorithms=["HS256"], audience=tool, issuer="agent-runtime"
        )
    except (KeyError, jwt.InvalidTokenError) as exc:
        backend.refused.append(type(exc).__name__)
        return None
    backend.claims.append(claims)
    return claims


@pytest.fixture
async def backend() -> AsyncIterator[Backend]:
    app = web.Application()
    state: dict[str, Backend] = {}

    async def events(request: web.Request) -> web.Response:
        claims = _who_asks(request, state["b"], "friends_events")
        if claims is None:
            return web.json_response({"error": "who are you?"}, status=401)
        days = [request.query["from_date"], request.query.get("to_date", "")]
        return web.json_response({"events": [f"Picnic on {days[0]}"], "for": claims["sub"], "range": days})

    async def drafts(request: web.Request) -> web.Response:
        claims = _who_asks(request, state["b"], "draft_post")
        if claims is None:
            return web.json_response({"error": "who are you?"}, status=401)
        body = await request.json()
        return web.json_response({"draft": body["text"], "user": claims["sub"]}, status=201)

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    async def big(request: web.Request) -> web.Response:
        return web.json_response({"blob": "x" * 5000})

    async def boom(request: web.Request) -> web.Response:
        return web.json_response({"error": "internal"}, status=500)

    async def not_json(request: web.Request) -> web.Response:
        return web.Response(text="{not json", content_type="application/json")

    async def held(request: web.Request) -> web.Response:
        backend = state["b"]
        backend.in_flight += 1
        backend.most_in_flight = max(backend.most_in_flight, backend.in_flight)
        await asyncio.sleep(0.2)
        backend.in_flight -= 1
        return web.json_response({"ok": True})

    app.router.add_get("/held", held)
    app.router.add_get("/events", events)
    app.router.add_post("/drafts", drafts)
    app.router.add_get("/slow", slow)
    app.router.add_get("/big", big)
    app.router.add_get("/boom", boom)
    app.router.add_get("/not-json", not_json)
    async with serving(app) as url:
        state["b"] = Backend(url=url)
        yield state["b"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _query_tool(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Ask the backend's {name}.",
        "method": "GET",
        "url": url,
        "parameters": {"from_date": {"type": "string", "description": "First day, YYYY-MM-DD."}},
        **extra,
    }


def _tools_file(tmp_path: Path, *tools: dict[str, Any]) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"http": list(tools)}), encoding="utf-8")
    return path


def _events_tool(backend: Backend) -> dict[str, Any]:
    return {
        "name": "friends_events",
        "description": "Events the user's friends go to between two dates.",
        "method": "GET",
        "url": f"{backend.url}/events",
        "parameters": {
            "from_date": {"type": "string", "description": "First day, YYYY-MM-DD."},
            "to_date": {"type": "string", "description": "Last day, YYYY-MM-DD.", "required": False},
        },
    }


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> StubReply:
    return StubReply(tool_calls=[StubToolCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls])


async def test_a_configured_tool_is_offered_called_with_who_asks_and_answered(
    make_harness: MakeHarness, make_user: Callable[[], User], backend: Backend, tmp_path: Path
) -> None:
    tools_file = _tools_file(tmp_path, _events_tool(backend))
    async with make_harness(tools_file=tools_file, tool_identity_secret=SecretStr(SECRET)) as h:
        results: list[str] = []
        offered: list[Any] = []
        users = [make_user(), make_user()]
        sessions = []
        for user in users:
            sid = await h.new_session(user)
            sessions.append(sid)
            before = len(h.stub.requests)
            h.stub.enqueue(
                intent_needs("Find the friends' events this weekend."),
                _calls(("call_ev", "friends_events", {"from_date": "2026-12-05", "to_date": "2026-12-06"})),
                execution_done("A picnic on Saturday.", {"events": 1}),
                organized("Your friends go to a picnic on Saturday."),
            )
            result = await h.run(user, sid, "what are my friends doing this weekend?")
            assert types(result.events)[-1] == "RUN_FINISHED", result.body
            results += [e["content"] for e in result.of_type("TOOL_CALL_RESULT")]
            offered.append(h.stub.requests[before + 1].body["tools"])

        # Offered after the tools agents.yaml grants, the same bytes for every user and call (the cached prefix).
        assert offered[0] == offered[1] == h.stub.requests[0].body["tools"]
        last = offered[0][-1]["function"]
        assert (last["name"], last["description"]) == (
            "friends_events",
            "Events the user's friends go to between two dates.",
        )
        assert last["parameters"]["required"] == ["from_date"]
        # Each call carried its own user and session, verified by the tool server; nothing was refused.
        assert backend.refused == []
        assert [(c["sub"], c["sid"], c["aud"]) for c in backend.claims] == [
            (str(users[0].ctx.user_id), sessions[0], "friends_events"),
            (str(users[1].ctx.user_id), sessions[1], "friends_events"),
        ]
        assert all(c["exp"] - c["iat"] == 60 for c in backend.claims)
        assert [json.loads(r) for r in results] == [
            {
                "status": 200,
                "data": {
                    "events": ["Picnic on 2026-12-05"],
                    "for": str(user.ctx.user_id),
                    "range": ["2026-12-05", "2026-12-06"],
                },
            }
            for user in users
        ]
        # A second turn of the first user: its first request starts with the whole first turn's, byte for byte (the
        # provider's cached prefix: system prompt, the tools with the backend's, the turn).
        before = len(h.stub.requests)
        h.stub.enqueue(intent_direct("Glad to help."))
        again = await h.run(users[0], sessions[0], "thanks!")
        assert types(again.events)[-1] == "RUN_FINISHED", again.body
        first_turn = [r for r in h.stub.requests[:before] if r.user_id == h.stub.requests[before].user_id]
        shared = serialise({**first_turn[0].body, "messages": first_turn[0].messages[:-1]})
        assert serialise(h.stub.requests[before].body).startswith(shared)
        capabilities = (await h.client.get("/v1/agui/capabilities", headers=users[0].headers)).json()
        listed = {tool["name"]: tool for tool in capabilities["tools"]["items"]}
        assert listed["friends_events"]["description"] == "Events the user's friends go to between two dates."


async def test_a_server_down_slow_failing_oversized_or_not_json_is_a_tool_result_and_the_run_goes_on(
    make_harness: MakeHarness, make_user: Callable[[], User], backend: Backend, tmp_path: Path
) -> None:
    tools_file = _tools_file(
        tmp_path,
        _query_tool("dead", f"http://127.0.0.1:{_closed_port()}/events"),
        _query_tool("slow", f"{backend.url}/slow", timeout_seconds=0.5),
        _query_tool("big", f"{backend.url}/big", max_result_bytes=1000),
        _query_tool("boom", f"{backend.url}/boom"),
        _query_tool("not_json", f"{backend.url}/not-json"),
    )
    async with make_harness(tools_file=tools_file, tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        names = ["dead", "slow", "big", "boom", "not_json"]
        h.stub.enqueue(
            intent_needs("Ask every backend tool."),
            _calls(*((f"call_{n}", n, {"from_date": "2026-12-05"}) for n in names)),
            execution_done("Every tool failed.", {"failed": 5}),
            organized("The backend is not answering right now."),
        )
        started = asyncio.get_running_loop().time()
        result = await h.run(user, sid, "ask everything")
        elapsed = asyncio.get_running_loop().time() - started

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        errors = {e["toolCallId"]: json.loads(e["content"])["error"] for e in result.of_type("TOOL_CALL_RESULT")}
        assert errors == {
            "call_dead": "dead: the tool's server could not be reached (ClientConnectorError)",
            "call_slow": "slow timed out after 0.5 s",
            "call_big": "big: the answer is larger than 1000 bytes",
            "call_boom": "boom: the tool's server answered HTTP 500",
            "call_not_json": "not_json: the answer is not valid JSON",
        }
        assert elapsed < 5, "the slow server was cut at its timeout"


async def test_calls_past_a_tools_concurrency_cap_wait_and_all_finish(
    make_harness: MakeHarness, make_user: Callable[[], User], backend: Backend, tmp_path: Path
) -> None:
    tool = _query_tool("held", f"{backend.url}/held", max_concurrency=2)
    async with make_harness(tools_file=_tools_file(tmp_path, tool), tool_identity_secret=SecretStr(SECRET)) as h:
        user = make_user()
        sid = await h.new_session(user)
        h.stub.enqueue(
            intent_needs("Ask six times."),
            _calls(*((f"call_{n}", "held", {"from_date": f"2026-12-0{n + 1}"}) for n in range(6))),
            execution_done("Six answers.", {}),
            organized("Done."),
        )
        result = await h.run(user, sid, "ask six times")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        contents = [json.loads(e["content"]) for e in result.of_type("TOOL_CALL_RESULT")]
        assert contents == [{"status": 200, "data": {"ok": True}}] * 6
        assert backend.most_in_flight == 2, "three times the cap asked at once: two in flight, the rest waited"


def _draft_tool(backend: Backend) -> dict[str, Any]:
    return {
        "name": "draft_post",
        "description": "Save a draft post in the user's name.",
        "method": "POST",
        "url": f"{backend.url}/drafts",
        "parameters": {"text": {"type": "string", "description": "The post's text.", "max_length": 500}},
        "requires_approval": True,
    }


@pytest.mark.parametrize("decision", ["resolved", "cancelled"])
async def test_a_tool_that_needs_approval_waits_for_the_user_across_a_restart(
    make_harness: MakeHarness, make_user: Callable[[], User], backend: Backend, tmp_path: Path, decision: str
) -> None:
    configured = {"tools_file": _tools_file(tmp_path, _draft_tool(backend)), "tool_identity_secret": SecretStr(SECRET)}
    user = make_user()
    async with make_harness(**configured) as h:
        sid = await h.new_session(user)
        turn = [{"id": "u-1", "role": "user", "content": "draft a post about the picnic"}]
        agui = {"threadId": sid, "runId": "r", "messages": turn, "state": {}, "tools": [], "context": []}
        h.stub.enqueue(
            intent_needs("Draft a post about the picnic."),
            _calls(("call_draft", "draft_post", {"text": "Picnic on Saturday!"})),
        )
        stopped = await h.agui(user, agui)

        assert types(stopped.events)[-1] == "RUN_FINISHED", stopped.body
        (interrupt,) = stopped.events[-1]["outcome"]["interrupts"]
        assert (interrupt["id"], interrupt["toolCallId"]) == ("approve-call_draft", "call_draft")
    assert backend.claims == [], "nothing is sent before the user decides"

    # Another process (a restart, or another replica) takes the user's decision.
    async with make_harness(**configured) as h:
        h.stub.enqueue(execution_done("Done.", {}), organized("Done."))
        resume = [{"interruptId": "approve-call_draft", "status": decision}]
        resumed = await h.agui(user, {**agui, "runId": "r2", "resume": resume})

        assert types(resumed.events)[-1] == "RUN_FINISHED", resumed.body
        (content,) = [e["content"] for e in resumed.of_type("TOOL_CALL_RESULT")]
    if decision == "cancelled":
        assert (json.loads(content), backend.claims) == ({"error": "denied by the user"}, [])
        return
    assert [(c["sub"], c["aud"]) for c in backend.claims] == [(str(user.ctx.user_id), "draft_post")]
    saved = {"draft": "Picnic on Saturday!", "user": str(user.ctx.user_id)}
    assert json.loads(content) == {"status": 201, "data": saved}


@pytest.mark.parametrize(
    ("tool", "secret", "problem"),
    [
        (_query_tool("ok", "http://127.0.0.1:9/{day}"), SECRET, "url placeholders ['day'] are not parameters"),
        (_query_tool("calculator", "http://127.0.0.1:9/"), SECRET, "tools ['calculator'] are already registered"),
        (_query_tool("ok", "http://127.0.0.1:9/", headers={"X-Key": "${NOT_SET_ANYWHERE}"}), SECRET, "NOT_SET"),
        (_query_tool("ok", "http://127.0.0.1:9/"), None, "TOOL_IDENTITY_SECRET must be set"),
        (_query_tool("ok", "http://127.0.0.1:9/"), "short", "TOOL_IDENTITY_SECRET must be set"),
        (_query_tool("Bad Name", "http://127.0.0.1:9/"), SECRET, "name"),
    ],
)
def test_a_bad_tools_file_stops_start_up_with_what_is_wrong(
    settings: Settings, tmp_path: Path, tool: dict[str, Any], secret: str | None, problem: str
) -> None:
    configured = settings.model_copy(
        update={"tools_file": _tools_file(tmp_path, tool), "tool_identity_secret": secret and SecretStr(secret)}
    )
    with pytest.raises(ToolsConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        load_config(configured)
