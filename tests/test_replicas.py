"""Two real `serve` processes on one database, as two replicas behind a load balancer: run exclusivity and
seq allocation hold across them; a stream dropped on one resumes on the other (byte for byte, exactly once,
accepted by the official client), and a cancel sent to one stops a run on the other; a replica killed with
SIGKILL mid-run, with takeovers off, has its run failed by the other (`run_lost`, also the end of its resumed stream)
within RUN_LEASE_SECONDS + RUN_SWEEP_SECONDS; and SIGTERM drains a replica so that the official AG-UI
client sees RUN_ERROR `run_interrupted` before the connection closes.

The tests share the two processes (CrewAI's import costs each ~10 s of CPU) and run in file order: the
SIGKILL test ends replica A, the SIGTERM test replica B.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from tests.conformance.harness import (
    Case,
    assert_accepted,
    ensure_client_installed,
    official_client_accepts,
    run_client,
)
from tests.conftest import User
from tests.runs.conftest import STUB_API_KEY, intent_direct, parse_sse, sse_frames, stage_request_text
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply
from tests.support.serve import ServeProcess, poll_until, start_serve
from tests.support.sse import frames_of, sse_body

from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.settings import Settings

LEASE_SECONDS = 10.0
SWEEP_SECONDS = 0.5
HANG = "[hang]"
SLOW = "[slow]"
STREAM = "[stream]"
ANSWER = "A resumable answer, streamed in small pieces so that a client can drop it halfway and come back. " * 3


def respond(request: RecordedRequest) -> StubReply:
    # The newest message: a turn whose run was lost reaches the model joined before it (never two user turns).
    text = stage_request_text(request).split("\n\n")[-1]
    if text.startswith(HANG):
        return intent_direct("never sent", delay_seconds=120)
    if text.startswith(STREAM):
        return intent_direct(ANSWER, chunk_chars=3, chunk_delay_seconds=0.03)
    return intent_direct(f"echo: {text}", delay_seconds=3 if text.startswith(SLOW) else 0)


@dataclass
class Replicas:
    a: ServeProcess
    b: ServeProcess
    stub: DeepSeekStub


@pytest.fixture(scope="module")
async def replicas(
    database_url: str, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replicas]:
    workdir = tmp_path_factory.mktemp("replicas")
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=respond) as stub:
        env = {
            "LLM_MODEL": "deepseek/deepseek-flash",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "RUN_HEARTBEAT_SECONDS": "1",
            "RUN_SWEEP_SECONDS": str(SWEEP_SECONDS),
            # Runs of a dead replica are failed here (`run_lost`): the path past the last takeover
            # (tests/test_takeover.py has them taken over).
            "RUN_MAX_TAKEOVERS": "0",
            "SHUTDOWN_GRACE_SECONDS": "1",
        }
        a, b = await asyncio.gather(
            start_serve("a", database_url=database_url, workdir=workdir, env=env),
            start_serve("b", database_url=database_url, workdir=workdir, env=env),
        )
        try:
            # CrewAI's import (in the background, awaited above) starves the event loop for seconds on a busy
            # machine: long enough to miss a short lease's renewals. One run each, then the tests.
            await asyncio.gather(*(_warm_up(server, User(settings)) for server in (a, b)))
            yield Replicas(a=a, b=b, stub=stub)
        finally:
            for server in (a, b):
                await server.close()


async def _warm_up(server: ServeProcess, user: User) -> None:
    response = await post_run(server, user, await new_session(server, user), "warm-up")
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED", response.text


async def post_run(server: ServeProcess, user: User, session_id: str, text: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=180) as client:
        return await client.post(f"/v1/sessions/{session_id}/runs", headers=user.headers, json={"message": text})


async def get(server: ServeProcess, user: User, path: str) -> Any:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        response = await client.get(path, headers=user.headers)
    assert response.status_code == 200, response.text
    return response.json()


async def get_text(server: ServeProcess, user: User, path: str) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        response = await client.get(path, headers=user.headers)
    assert response.status_code == 200, response.text
    return response.text


async def new_session(server: ServeProcess, user: User) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        response = await client.post("/v1/sessions", headers=user.headers, json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def model_called(stub: DeepSeekStub, count: int) -> None:
    # A replica's first run waits for its CrewAI import (seconds of CPU; longer on a busy machine).
    async with asyncio.timeout(120):
        await stub.wait_for_requests(count)


async def test_a_session_runs_on_one_replica_at_a_time_and_its_seqs_continue_across_them(
    replicas: Replicas, user: User
) -> None:
    sid = await new_session(replicas.a, user)
    seen = len(replicas.stub.requests)
    on_a = asyncio.create_task(post_run(replicas.a, user, sid, f"{SLOW} first"))
    await model_called(replicas.stub, seen + 1)

    busy = await post_run(replicas.b, user, sid, "meanwhile")
    assert busy.status_code == 409, busy.text
    assert busy.json()["error"]["code"] == "run_in_progress"

    first = await on_a
    assert parse_sse(first.text)[-1]["type"] == "RUN_FINISHED", first.text
    second = await post_run(replicas.b, user, sid, "then on b")
    assert parse_sse(second.text)[-1]["type"] == "RUN_FINISHED", second.text
    messages = await get(replicas.a, user, f"/v1/sessions/{sid}/messages")
    assert [(m["seq"], m["role"], m["content"]) for m in messages["items"]] == [
        (1, "user", f"{SLOW} first"),
        (2, "assistant", f"echo: {SLOW} first"),
        (3, "user", "then on b"),
        (4, "assistant", "echo: then on b"),
    ]


async def test_a_stream_dropped_on_one_replica_resumes_on_the_other_exactly_once(
    replicas: Replicas, user: User
) -> None:
    sid = await new_session(replicas.a, user)
    async with httpx.AsyncClient(timeout=60) as http:
        run_url = f"{replicas.a.base_url}/v1/sessions/{sid}/runs"
        async with http.stream("POST", run_url, headers=user.headers, json={"message": f"{STREAM} hi"}) as first:
            run_id = first.headers["x-run-id"]
            seen = await frames_of(first.aiter_lines(), 6)
        last_id = seen[-1].split("\n")[0][len("id: ") :]
        events_path = f"/v1/sessions/{sid}/runs/{run_id}/events"
        asked = time.monotonic()
        headers = {**user.headers, "Last-Event-ID": last_id}
        async with http.stream("GET", f"{replicas.b.base_url}{events_path}", headers=headers) as resumed:
            assert resumed.status_code == 200, await resumed.aread()
            lines = resumed.aiter_lines()
            rest = await frames_of(lines, 1)
            first_replayed = time.monotonic() - asked
            rest += await frames_of(lines)

    whole = seen + rest
    frames = sse_frames(sse_body(whole))
    assert [seq for _, seq, _ in frames] == list(range(1, len(whole) + 1)), "each event once, in order"
    assert {rid for rid, _, _ in frames} == {run_id}
    events = [event for _, _, event in frames]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == ANSWER
    assert first_replayed < 2.0, first_replayed  # the benchmark measures it under load (docs/benchmarks.md)
    async with httpx.AsyncClient(base_url=replicas.a.base_url, timeout=30) as http:
        replay = await http.get(events_path, headers=user.headers)
    assert replay.text == sse_body(whole)  # the stored log is what both streams sent, byte for byte
    await official_client_accepts(events, sid, run_id)


async def test_a_cancel_sent_to_one_replica_stops_a_run_on_the_other(replicas: Replicas, user: User) -> None:
    sid = await new_session(replicas.a, user)
    closed_before = len(replicas.stub.closed_by_client)
    async with httpx.AsyncClient(timeout=60) as http:
        run_url = f"{replicas.a.base_url}/v1/sessions/{sid}/runs"
        async with http.stream("POST", run_url, headers=user.headers, json={"message": f"{STREAM} go"}) as stream:
            run_id = stream.headers["x-run-id"]
            lines = stream.aiter_lines()
            seen = await frames_of(lines, 6)
            cancel = await http.post(
                f"{replicas.b.base_url}/v1/sessions/{sid}/runs/{run_id}/cancel", headers=user.headers
            )
            asked = time.monotonic()
            rest = await frames_of(lines)
            took = time.monotonic() - asked
    assert (cancel.status_code, cancel.json()) == (202, {"id": run_id, "status": "running"})
    assert took < 1.0, took
    async with asyncio.timeout(1):
        await replicas.stub.wait_for_client_close(closed_before + 1)
    events = [event for _, _, event in sse_frames(sse_body(seen + rest))]
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}, events[-1]
    runs = await poll_until(
        lambda: get(replicas.b, user, f"/v1/sessions/{sid}/runs"),
        lambda page: page["items"][0]["status"] != "running",
        within=10,
    )
    assert runs["items"][0]["status"] == "cancelled"


async def test_a_replica_killed_mid_run_with_takeovers_off_has_its_run_failed_by_the_other(
    replicas: Replicas, user: User
) -> None:
    sid = await new_session(replicas.a, user)
    seen = len(replicas.stub.requests)
    on_a = asyncio.create_task(post_run(replicas.a, user, sid, f"{HANG} a question"))
    await model_called(replicas.stub, seen + 1)

    replicas.a.kill()
    killed_at = time.monotonic()
    await replicas.a.proc.wait()
    with pytest.raises(httpx.TransportError):
        await on_a
    session = await poll_until(
        lambda: get(replicas.b, user, f"/v1/sessions/{sid}"), lambda s: s["status"] != "running", within=30
    )
    took = time.monotonic() - killed_at

    assert session["status"] == "failed"
    # Lease + sweep interval, plus the moment a sweep takes (and a busy machine's slack).
    assert took < LEASE_SECONDS + SWEEP_SECONDS + 2.0, took
    runs = await get(replicas.b, user, f"/v1/sessions/{sid}/runs")
    assert [(r["status"], r["error_code"], r["error_id"]) for r in runs["items"]] == [
        ("failed", "run_lost", session["error_id"])
    ]
    messages = await get(replicas.b, user, f"/v1/sessions/{sid}/messages")
    assert [(m["seq"], m["role"], m["content"]) for m in messages["items"]] == [(1, "user", f"{HANG} a question")]
    resumed = await get_text(replicas.b, user, f"/v1/sessions/{sid}/runs/{runs['items'][0]['id']}/events")
    ending = sse_frames(resumed)[-1]
    assert ending[1:] == (
        2_147_483_647,  # after anything the dead replica may have streamed without storing it
        {
            "type": "RUN_ERROR",
            "code": "run_lost",
            "message": f"the run was lost: its server stopped (error_id {session['error_id']})",
        },
    )
    again = await post_run(replicas.b, user, sid, "and now?")
    assert parse_sse(again.text)[-1]["type"] == "RUN_FINISHED", again.text


async def test_sigterm_ends_the_official_clients_stream_with_run_interrupted_and_exits_cleanly(
    replicas: Replicas, user: User, engine: RuntimeEngine, settings: Settings
) -> None:
    ensure_client_installed()
    sid = await new_session(replicas.b, user)
    case = Case(user_id=user.id, headers=user.headers, thread_id=sid, user_message_id=f"user-{uuid4()}")
    seen = len(replicas.stub.requests)
    client = asyncio.create_task(run_client(replicas.b, case, f"{HANG} until the deploy"))  # type: ignore[arg-type]
    await model_called(replicas.stub, seen + 1)

    status = await replicas.b.stop()
    summary = await client

    events = assert_accepted(summary, terminal="RUN_ERROR")
    error = events[-1]
    assert error["code"] == "run_interrupted", error
    session = await engine.sessions.get(user.ctx, UUID(sid))
    assert session.status == "failed"
    assert error["message"] == f"the server shut down before the run finished (error_id {session.error_id})"
    assert status == 0, replicas.b.log_tail()
    assert "Traceback" not in replicas.b.log_tail(20_000)
