"""Admission control and threads under load: a run is refused before its stream starts (429 `server_busy`,
429 `too_many_runs`), never admitted only to time out inside, and runs never wait for each other's threads."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    MakeHarness,
    RunResult,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    stage_of,
    types,
    warm_up,
)
from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall
from tests.support.metrics import delta, scrape


def full_run_responder(delay: float) -> Callable[[RecordedRequest], StubReply]:
    """A full three-stage run with one calculator call (four model calls), each answered after `delay`."""

    def respond(request: RecordedRequest) -> StubReply:
        stage = stage_of(request)
        if stage == "intent":
            return intent_needs("Compute 6 * 7.", delay_seconds=delay)
        if stage == "execution":
            if request.messages[-1]["role"] == "tool":
                return execution_done("6 * 7 = 42", {"result": "42"}, delay_seconds=delay)
            call = StubToolCall(id=f"call_{time.monotonic_ns()}", name="calculator", arguments='{"expression": "6*7"}')
            return StubReply(tool_calls=[call], delay_seconds=delay)
        return organized("6 * 7 is 42.", delay_seconds=delay)

    return respond


def slow_direct(delay: float) -> Callable[[RecordedRequest], StubReply]:
    return lambda request: intent_direct("done", delay_seconds=delay)


def refusal(response: RunResult, code: str, retry_after: str) -> dict[str, Any]:
    assert response.status == 429, response.body
    assert response.headers["retry-after"] == retry_after
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = json.loads(response.body)["error"]
    assert error["code"] == code, error
    return error


async def timed_run(h: Harness, user: User, session_id: str, text: str) -> tuple[RunResult, float]:
    started = time.monotonic()
    result = await h.run(user, session_id, text)
    return result, time.monotonic() - started


@contextmanager
def small_default_executor(loop: asyncio.AbstractEventLoop, workers: int) -> Iterator[None]:
    """The loop's default executor (LiteLLM's per-call set-up, DNS, to_thread) shrunk for the test."""
    small = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="small-default")
    loop.set_default_executor(small)
    try:
        yield
    finally:
        loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="asyncio"))
        small.shutdown(wait=False)


async def test_three_times_the_pool_of_full_runs_complete_or_are_refused_fast_and_none_times_out(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    """The starvation regression: 4 run threads, a default executor of 2 threads (LiteLLM needs one for a
    moment on every call), 12 full runs at once. Before the flow threads had their own pool, each run held a
    default-executor thread for its whole life and every model call waited for another: all timed out."""
    await warm_up(h, make_user())
    async with make_harness(max_concurrent_runs=4, max_concurrent_runs_per_user=100, run_timeout_seconds=20) as lim:
        lim.stub.responder = full_run_responder(0.2)
        user = make_user()
        sessions = [await lim.new_session(user) for _ in range(12)]
        with small_default_executor(asyncio.get_running_loop(), 2):
            outcomes = await asyncio.gather(*(timed_run(lim, user, sid, "what is 6*7?") for sid in sessions))

        finished = [r for r, _ in outcomes if r.status == 200]
        refused = [(r, took) for r, took in outcomes if r.status != 200]
        assert len(finished) == 4 and len(refused) == 8, [r.status for r, _ in outcomes]
        for result in finished:
            assert types(result.events)[-1] == "RUN_FINISHED", result.body
            assert len(result.of_type("TOOL_CALL_RESULT")) == 1
        for response, took in refused:
            refusal(response, "server_busy", "1")
            assert took < 0.5, took  # refused at once, not after waiting for a slot
        assert lim.engine.runs.admission.in_flight == 0
        # Every finished run made its four model calls; the refused ones made none.
        assert len(lim.stub.requests) == 16


async def test_a_full_process_refuses_runs_and_reports_it_on_readiness_until_a_slot_frees(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    await warm_up(h, make_user())
    async with make_harness(max_concurrent_runs=2) as lim:
        lim.stub.responder = slow_direct(1.0)
        user = make_user()
        running = [asyncio.create_task(lim.run(user, await lim.new_session(user), "hi")) for _ in range(2)]
        async with asyncio.timeout(30):
            await lim.stub.wait_for_requests(2)

        ready = await lim.client.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "server_busy"
        other = make_user()
        sid = await lim.new_session(other)
        refused = await lim.run(other, sid, "one more")
        error = refusal(refused, "server_busy", "1")
        assert error["message"] == "this server runs as many runs as it may (2); retry shortly"
        assert (await lim.session(other, sid))["status"] == "pending"  # refused before anything was stored
        assert await lim.rows(other, sid) == []

        assert all(types(r.events)[-1] == "RUN_FINISHED" for r in await asyncio.gather(*running))
        assert (await lim.client.get("/health/ready")).json()["runs_in_flight"] == 0
        lim.stub.responder = slow_direct(0.0)
        again = await lim.run(other, sid, "now there is room")
        assert types(again.events)[-1] == "RUN_FINISHED", again.body


async def test_a_full_process_refuses_run_requests_before_reading_who_sent_them_or_what(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    """While full, a request to start a run gets its 429 before routing, authentication and validation (the
    cheap refusal a burst needs): three times the limit of them, one of each kind, all answered alike, and
    counted; the other routes answer as ever."""
    await warm_up(h, make_user())
    async with make_harness(max_concurrent_runs=1) as lim:
        lim.stub.responder = slow_direct(1.0)
        user = make_user()
        sid = await lim.new_session(user)
        running = asyncio.create_task(lim.run(user, sid, "hi"))
        async with asyncio.timeout(30):
            await lim.stub.wait_for_requests(1)
        before = await scrape(lim.client)

        refused = [
            await lim.client.post(f"/v1/sessions/{sid}/runs", json={"message": "one more"}, headers=user.headers),
            await lim.client.post(f"/v1/sessions/{sid}/runs", json={"message": 5}),  # no token, invalid body
            await lim.client.post("/v1/agui", content=b"not json", headers={"content-type": "application/json"}),
        ]
        for response in refused:
            assert (response.status_code, response.headers["retry-after"]) == (429, "1"), response.text
            assert response.json() == {
                "error": {
                    "code": "server_busy",
                    "message": "this server runs as many runs as it may (1); retry shortly",
                    "details": [],
                    "request_id": response.headers["x-request-id"],
                    "error_id": None,
                }
            }
        after = await scrape(lim.client)
        assert delta(before, after, "agent_runtime_admission_refusals_total", reason="server_busy") == 3
        runs_route = {"method": "POST", "route": "/v1/sessions/{session_id}/runs", "status": "429"}
        assert delta(before, after, "agent_runtime_http_requests_total", **runs_route) == 2
        agui_route = {"method": "POST", "route": "/v1/agui", "status": "429"}
        assert delta(before, after, "agent_runtime_http_requests_total", **agui_route) == 1

        listed = await lim.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)
        assert (listed.status_code, listed.json()["total"]) == (200, 1)
        assert (await lim.client.get("/v1/sessions")).status_code == 401
        assert types((await running).events)[-1] == "RUN_FINISHED"


async def test_a_user_at_their_limit_is_refused_while_other_users_run(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    await warm_up(h, make_user())
    async with make_harness(max_concurrent_runs_per_user=2) as lim:
        lim.stub.responder = slow_direct(1.0)
        user, other = make_user(), make_user()
        sessions = [await lim.new_session(user) for _ in range(3)]
        running = [asyncio.create_task(lim.run(user, sid, "hi")) for sid in sessions[:2]]
        async with asyncio.timeout(30):
            await lim.stub.wait_for_requests(2)

        third = await lim.run(user, sessions[2], "a third one")
        error = refusal(third, "too_many_runs", "2")
        assert error["message"] == "you have as many runs in progress as you may (MAX_CONCURRENT_RUNS_PER_USER)"
        assert (await lim.session(user, sessions[2]))["status"] == "pending"
        assert await lim.rows(user, sessions[2]) == []
        lim.stub.responder = slow_direct(0.0)
        theirs = await lim.run(other, await lim.new_session(other), "someone else")
        assert types(theirs.events)[-1] == "RUN_FINISHED", theirs.body

        assert all(types(r.events)[-1] == "RUN_FINISHED" for r in await asyncio.gather(*running))
        now = await lim.run(user, sessions[2], "a third one")
        assert types(now.events)[-1] == "RUN_FINISHED", now.body


async def test_two_starts_at_the_users_limit_exactly_one_passes(
    h: Harness, make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    await warm_up(h, make_user())
    async with make_harness(max_concurrent_runs_per_user=1) as lim:
        lim.stub.responder = slow_direct(0.3)
        user = make_user()
        for _ in range(5):  # five rounds: a race that lets both through shows up
            first, second = [await lim.new_session(user) for _ in range(2)]
            results = await asyncio.gather(lim.run(user, first, "a"), lim.run(user, second, "b"))
            assert sorted(r.status for r in results) == [200, 429], [r.body for r in results]
            refusal(next(r for r in results if r.status == 429), "too_many_runs", "2")
