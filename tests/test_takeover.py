"""Runs that survive their process (issue 33): two real `serve` replicas on one database; replica A is killed with
SIGKILL while five runs are each at another boundary, and replica B takes every one over and finishes it from its last
stored step, under the same run id:
- during the intent call (nothing irreversible yet: the turn runs again from the start);
- after a tool call started (a POST the backend never answered: its outcome is unknown, it is not run again);
- after an idempotent tool call started (a GET: it runs again);
- after a tool's result was stored (the tool is not run again, the execution stage goes on);
- while the answer streams (the client's resumed stream, put together with what it saw before, passes the official
  AG-UI client; the text the dead replica streamed is dropped, never duplicated).
The idempotent call carries the same `Idempotency-Key` both times. Each run is billed once: every call B made, and
the tool-call rows A stored, are rows; what A had sent but not stored is charged once, as its last renewal's estimate.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import jwt
import pytest
import yaml
from aiohttp import web
from tests.conformance.harness import official_client_accepts
from tests.conftest import User
from tests.runs.conftest import (
    STUB_API_KEY,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    parse_sse,
    sse_frames,
    stage_of,
    stage_request_text,
)
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply, StubToolCall
from tests.support.database import PgServer, create_database, drop_database
from tests.support.local_http import serving
from tests.support.metrics import Samples, delta, scrape
from tests.support.serve import ServeProcess, poll_until, start_serve
from tests.support.sse import frames_of, sse_body

from agent_runtime.db.migrations import apply_migrations
from agent_runtime.engine.runs.takeover.decisions import OUTCOME_UNKNOWN
from agent_runtime.settings import Settings

LEASE_SECONDS = 4.0
SWEEP_SECONDS = 0.5
SECRET = "takeover-tool-identity-secret-0123456789"
INTENT, STARTED, LOOKUP, RESULT, STREAM = "[intent]", "[started]", "[lookup]", "[result]", "[stream]"
DEPLOY = "[deploy]"
# Longer than a replica's restart (its CrewAI import), so that runs are in flight at both restarts.
DEPLOY_CALL_SECONDS = 15.0
SLOW_ANSWER = "A long answer that the dying replica streams slowly, three characters at a time. " * 4


@dataclass
class Backend:
    url: str = ""
    # (tool, session id) -> calls received, and the idempotency keys they carried
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    keys: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # Sessions whose calls never answer (the tool is running when the replica dies).
    blocked: set[str] = field(default_factory=set)
    entered: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[Backend]:
    state = Backend()
    forever = asyncio.Event()

    async def call(request: web.Request) -> web.Response:
        tool = request.match_info["tool"]
        claims = jwt.decode(
            request.headers["X-Agent-Identity"], SECRET, algorithms=["HS256"], audience=tool, issuer="agent-runtime"
        )
        key = (tool, claims["sid"])
        state.calls[key] = state.calls.get(key, 0) + 1
        state.keys.setdefault(key, []).append(request.headers["Idempotency-Key"])
        state.entered.set()
        if claims["sid"] in state.blocked and state.calls[key] == 1:
            await forever.wait()
        return web.json_response({"visits": state.calls[key]})

    app = web.Application()
    app.router.add_route("*", "/{tool}", call)
    async with serving(app) as url:
        state.url = url
        yield state
        forever.set()


def _tool(name: str, method: str, backend: Backend) -> dict[str, str]:
    return {"name": name, "description": f"{name}, for the tests.", "method": method, "url": f"{backend.url}/{name}"}


def _reply_tool(name: str) -> StubReply:
    return StubReply(tool_calls=[StubToolCall(id=f"call_{name}", name=name, arguments="{}")])


@dataclass
class Script:
    """The model, per run (the marker its user turn starts with); the first answer of some calls never comes."""

    done_once: set[str] = field(default_factory=set)

    def once(self, key: str) -> bool:
        first = key not in self.done_once
        self.done_once.add(key)
        return first

    def respond(self, request: RecordedRequest) -> StubReply:
        stage, marker = stage_of(request), stage_request_text(request).split(" ", 1)[0]
        results = [m for m in request.messages if m.get("role") == "tool"]
        if marker == DEPLOY:
            return intent_direct("deployed", delay_seconds=DEPLOY_CALL_SECONDS)
        if marker not in (INTENT, STARTED, LOOKUP, RESULT, STREAM):
            return intent_direct(f"echo: {stage_request_text(request)}")
        if stage == "intent":
            if marker == INTENT:
                hang = self.once(marker)
                return intent_direct("Back after the intent call.", delay_seconds=120 if hang else 0)
            return intent_needs("Visit the counter.")
        if stage == "execution":
            if not results:
                return _reply_tool("lookup" if marker == LOOKUP else "count_visit")
            hang = marker == RESULT and self.once(marker)
            return execution_done("Visited.", {"results": len(results)}, delay_seconds=120 if hang else 0)
        if marker == STREAM and self.once(marker):
            return organized(SLOW_ANSWER, chunk_chars=3, chunk_delay_seconds=0.05)
        return organized(f"Done: {marker}")


@dataclass
class Pair:
    a: ServeProcess
    b: ServeProcess
    stub: DeepSeekStub
    env: dict[str, str]
    workdir: Path
    database_url: str


@pytest.fixture(scope="module")
async def own_database(pg_server: PgServer) -> AsyncIterator[str]:
    """The replicas' own database: the suite's in-process engines (takeovers off) sweep the shared one."""
    name = await create_database(pg_server)
    url = pg_server.url_for(name)
    await apply_migrations(url)
    yield url
    await drop_database(pg_server, name)


@pytest.fixture(scope="module")
async def own_pool(own_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(own_database, min_size=1, max_size=2)
    yield pool
    await pool.close()


@pytest.fixture(scope="module")
async def pair(
    own_database: str, settings: Settings, backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Pair]:
    workdir = tmp_path_factory.mktemp("takeover")
    tools = {
        "http": [
            {
                "name": "count_visit",
                "description": "Count a visit.",
                "method": "POST",
                "url": f"{backend.url}/count_visit",
            },
            {"name": "lookup", "description": "Look the counter up.", "method": "GET", "url": f"{backend.url}/lookup"},
        ]
    }
    (workdir / "tools.yaml").write_text(yaml.safe_dump(tools), encoding="utf-8")
    script = Script()
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=script.respond) as stub:
        env = {
            "LLM_MODEL": "deepseek/deepseek-flash",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "RUN_HEARTBEAT_SECONDS": "1",
            "RUN_SWEEP_SECONDS": str(SWEEP_SECONDS),
            "RUN_MAX_TAKEOVERS": "2",
            "MAX_CONCURRENT_RUNS_PER_USER": "8",
            "SHUTDOWN_GRACE_SECONDS": "1",
            "TOOLS_FILE": str(workdir / "tools.yaml"),
            "TOOL_IDENTITY_SECRET": SECRET,
        }
        a, b = await asyncio.gather(
            start_serve("a", database_url=own_database, workdir=workdir, env=env),
            start_serve("b", database_url=own_database, workdir=workdir, env=env),
        )
        try:
            for server in (a, b):  # CrewAI's import starves the loop for seconds: warm up before short leases
                await _warm_up(server, User(settings))
            yield Pair(a=a, b=b, stub=stub, env=env, workdir=workdir, database_url=own_database)
        finally:
            for server in (a, b):
                await server.close()


async def _warm_up(server: ServeProcess, user: User) -> None:
    sid = await _new_session(server, user)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=180) as client:
        warm = await client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi"})
    assert parse_sse(warm.text)[-1]["type"] == "RUN_FINISHED", warm.text


async def _new_session(server: ServeProcess, user: User) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        response = await client.post("/v1/sessions", headers=user.headers, json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _get(server: ServeProcess, user: User, path: str) -> Any:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        response = await client.get(path, headers=user.headers)
    assert response.status_code == 200, response.text
    return response.json()


def _requests_of(stub: DeepSeekStub, marker: str) -> list[RecordedRequest]:
    return [r for r in stub.requests if r.messages and stage_request_text(r).startswith(marker)]


@dataclass
class Streamed:
    """The [stream] run's client on replica A: the frames it saw before A died."""

    run_id: str = ""
    frames: list[str] = field(default_factory=list)
    texting: asyncio.Event = field(default_factory=asyncio.Event)


async def _stream_until_cut(server: ServeProcess, user: User, sid: str, seen: Streamed) -> None:
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            url = f"{server.base_url}/v1/sessions/{sid}/runs"
            async with http.stream("POST", url, headers=user.headers, json={"message": f"{STREAM} go"}) as response:
                seen.run_id = response.headers["x-run-id"]
                lines = response.aiter_lines()
                while True:
                    (frame,) = await frames_of(lines, 1)
                    seen.frames.append(frame)
                    if '"type":"TEXT_MESSAGE_CONTENT"' in frame:
                        seen.texting.set()
    except (httpx.TransportError, ValueError):
        return  # the replica died under the stream


async def _post_and_drop(server: ServeProcess, user: User, sid: str, text: str) -> None:
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            await client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": text})
    except httpx.TransportError:
        return


async def test_a_replica_killed_with_runs_at_every_boundary_has_each_finished_by_the_other(
    pair: Pair, backend: Backend, user: User, own_pool: asyncpg.Pool
) -> None:
    markers = [INTENT, STARTED, LOOKUP, RESULT]
    sids = {marker: await _new_session(pair.a, user) for marker in [*markers, STREAM]}
    backend.blocked |= {sids[STARTED], sids[LOOKUP]}
    clients = [asyncio.create_task(_post_and_drop(pair.a, user, sids[m], f"{m} go")) for m in markers]
    seen = Streamed()
    clients.append(asyncio.create_task(_stream_until_cut(pair.a, user, sids[STREAM], seen)))

    def in_position() -> bool:
        at_result = [r for r in _requests_of(pair.stub, RESULT) if any(m.get("role") == "tool" for m in r.messages)]
        return (
            bool(_requests_of(pair.stub, INTENT))
            and backend.calls.get(("count_visit", sids[STARTED]), 0) == 1
            and backend.calls.get(("lookup", sids[LOOKUP]), 0) == 1
            and bool(at_result)
            and seen.texting.is_set()
        )

    await poll_until(lambda: asyncio.sleep(0.05, in_position()), bool, within=120)
    # One lease renewal more (RUN_HEARTBEAT_SECONDS=1): what A has sent so far reaches the database, as it does for
    # any run in flight longer than a heartbeat (a run killed within its first heartbeat is charged nothing).
    await asyncio.sleep(1.5)
    before = await _metrics(pair.b)
    pair.a.kill()
    killed_at = time.monotonic()
    await pair.a.proc.wait()
    await asyncio.gather(*clients)

    async def statuses() -> list[str]:
        runs = [await _get(pair.b, user, f"/v1/sessions/{sid}/runs") for sid in sids.values()]
        return [r["items"][0]["status"] for r in runs]

    await poll_until(statuses, lambda found: found == ["completed"] * 5, within=60)
    finished_after = time.monotonic() - killed_at
    assert finished_after < LEASE_SECONDS + SWEEP_SECONDS + 20, finished_after
    # For ops, on B: the run killed in its intent call went on from its start, the four past it from their intent.
    after = await _metrics(pair.b)
    assert delta(before, after, "agent_runtime_runs_taken_over_total", resumed_from="start") == 1
    assert delta(before, after, "agent_runtime_runs_taken_over_total", resumed_from="intent") == 4
    assert delta(before, after, "agent_runtime_runs_lost_total") == 0

    messages = {m: (await _get(pair.b, user, f"/v1/sessions/{sid}/messages"))["items"] for m, sid in sids.items()}

    def shape(marker: str) -> list[tuple[str, str]]:
        return [(item["role"], item["content"]) for item in messages[marker]]

    # During the intent call: the turn ran again from its start, once.
    assert shape(INTENT) == [("user", f"{INTENT} go"), ("assistant", "Back after the intent call.")]
    # A POST that started and never answered: not run again, its outcome unknown to the model.
    assert shape(STARTED) == [
        ("user", f"{STARTED} go"),
        ("assistant", ""),
        ("tool", OUTCOME_UNKNOWN),
        ("assistant", f"Done: {STARTED}"),
    ]
    assert backend.calls[("count_visit", sids[STARTED])] == 1
    # A GET (idempotent) that started: run again.
    assert json.loads(shape(LOOKUP)[2][1]) == {"status": 200, "data": {"visits": 2}}
    assert backend.calls[("lookup", sids[LOOKUP])] == 2
    (lookup_run,) = (await _get(pair.b, user, f"/v1/sessions/{sids[LOOKUP]}/runs"))["items"]
    assert backend.keys[("lookup", sids[LOOKUP])] == [f"{lookup_run['id']}:call_lookup"] * 2, "the same key twice"
    # After the result was stored: not run again.
    assert json.loads(shape(RESULT)[2][1]) == {"status": 200, "data": {"visits": 1}}
    assert backend.calls[("count_visit", sids[RESULT])] == 1
    assert backend.calls[("count_visit", sids[STREAM])] == 1
    assert shape(STREAM)[-1] == ("assistant", f"Done: {STREAM}")

    for marker, sid in sids.items():
        run = await own_pool.fetchrow(
            "SELECT r.id, r.takeovers, r.unrecorded_cny, s.run_reserved_cny FROM agent_runs r "
            "JOIN agent_chat_sessions s ON s.id = r.session_id WHERE r.session_id = $1",
            UUID(sid),
        )
        assert run["takeovers"] == 1, marker
        billed = await own_pool.fetchval(
            "SELECT count(*) FROM agent_chat_messages WHERE session_id = $1 AND cost IS NOT NULL AND cost > 0",
            UUID(sid),
        )
        answered = [r for r in _requests_of(pair.stub, marker) if r.billed is not None]
        # Every answered call is one billed row, except what A had in memory only: its intent answer (and the
        # [stream] run's execution answer), charged instead within the estimate below.
        lost_in_memory = {INTENT: 0, STARTED: 1, LOOKUP: 1, RESULT: 1, STREAM: 2}[marker]
        assert billed == len(answered) - lost_in_memory, marker
        assert Decimal(0) < run["unrecorded_cny"] <= run["run_reserved_cny"], marker

    # The stream the client saw on A, then resumed on B after its last id: one coherent run for the official client.
    last_id = seen.frames[-1].split("\n")[0][len("id: ") :]
    async with httpx.AsyncClient(base_url=pair.b.base_url, timeout=30) as http:
        path = f"/v1/sessions/{sids[STREAM]}/runs/{seen.run_id}/events"
        rest = await http.get(path, headers={**user.headers, "Last-Event-ID": last_id})
    whole = sse_frames(sse_body(seen.frames) + rest.text)
    events = [event for _, _, event in whole]
    resumed_at = next(i for i, e in enumerate(events) if e["type"] == "RUN_ERROR")
    assert events[resumed_at]["code"] == "run_taken_over"
    assert whole[resumed_at][1] == 1_000_001, "the taken-over part is numbered after anything A streamed"
    assert [e["type"] for e in events[resumed_at : resumed_at + 4]] == [
        "RUN_ERROR",
        "RUN_STARTED",
        "CUSTOM",
        "MESSAGES_SNAPSHOT",
    ]
    assert events[-1]["type"] == "RUN_FINISHED"
    summary = await official_client_accepts(events, sids[STREAM], seen.run_id)
    answers = [m["content"] for m in summary["messages"] if m["role"] == "assistant" and m.get("content")]
    assert answers == [f"Done: {STREAM}"], "the text A streamed is dropped, the answer is there once"


async def _metrics(server: ServeProcess) -> Samples:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        return await scrape(client)


async def _run_until_its_stream_ends(server: ServeProcess, user: User, sid: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        response = await client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": f"{DEPLOY} go"})
    return parse_sse(response.text)[-1]


async def test_a_rolling_restart_with_runs_in_flight_and_a_short_drain_grace_loses_no_run(
    pair: Pair, settings: Settings, own_pool: asyncpg.Pool
) -> None:
    users = [User(settings) for _ in range(20)]
    a2 = await start_serve("a2", database_url=pair.database_url, workdir=pair.workdir, env=pair.env)
    started: list[ServeProcess] = [a2]
    try:
        await _warm_up(a2, User(settings))
        old = [a2] * 10 + [pair.b] * 10
        sids = [await _new_session(server, user) for server, user in zip(old, users, strict=True)]
        session_ids = [UUID(sid) for sid in sids]
        seen = len(_requests_of(pair.stub, DEPLOY))
        streams = [
            asyncio.create_task(_run_until_its_stream_ends(server, user, sid))
            for server, user, sid in zip(old, users, sids, strict=True)
        ]
        await poll_until(
            lambda: asyncio.sleep(0, len(_requests_of(pair.stub, DEPLOY))), lambda n: n >= seen + 20, within=60
        )

        # One replica after the other: each drains for SHUTDOWN_GRACE_SECONDS (1 s, far shorter than the runs), hands
        # its runs over and exits; the other takes them over; the replacement starts before the next restart.
        assert await pair.b.stop() == 0, pair.b.log_tail()
        b2 = await start_serve("b2", database_url=pair.database_url, workdir=pair.workdir, env=pair.env)
        started.append(b2)
        assert await a2.stop() == 0, a2.log_tail()
        ends = await asyncio.gather(*streams)

        async def statuses() -> list[str]:
            rows = await own_pool.fetch("SELECT status FROM agent_runs WHERE session_id = ANY($1)", session_ids)
            return sorted(str(r["status"]) for r in rows)

        await poll_until(statuses, lambda found: found == ["completed"] * 20, within=90)
        assert {(e["type"], e["code"]) for e in ends} == {("RUN_ERROR", "run_handed_over")}
        rows = await own_pool.fetch(
            "SELECT r.takeovers, r.error_code, (SELECT array_agg(m.content ORDER BY m.seq) FROM agent_chat_messages m "
            "WHERE m.session_id = r.session_id AND m.seq > 0) AS thread FROM agent_runs r "
            "WHERE r.session_id = ANY($1)",
            session_ids,
        )
        assert [r["error_code"] for r in rows] == [None] * 20, "no run lost"
        assert sorted(r["takeovers"] for r in rows) == [1] * 10 + [2] * 10
        assert [r["thread"] for r in rows] == [[f"{DEPLOY} go", "deployed"]] * 20, "each turn answered once"
    finally:
        for server in started:
            await server.close()
