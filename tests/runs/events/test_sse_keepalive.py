"""SSE keepalive: while a run's stream is silent (the model held by the test), a comment line `: keepalive`
comes every SSE_KEEPALIVE_SECONDS on the live stream and on a resumed one (GET .../events); the run's event
log never holds one, so a replay is events only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
from tests.conftest import User
from tests.runs.conftest import MakeHarness, intent_direct, parse_sse
from tests.runs.events.test_runs_disconnect import served

KEEPALIVE = ": keepalive"
INTERVAL = 0.2


async def _until_keepalives(lines: AsyncIterator[str], count: int) -> list[str]:
    """The stream's lines up to its `count`-th keepalive (bounded: 30 s)."""
    seen: list[str] = []
    async with asyncio.timeout(30):
        async for line in lines:
            seen.append(line)
            if seen.count(KEEPALIVE) == count:
                return seen
    raise AssertionError(f"the stream ended after {seen}")


async def test_silent_live_and_resumed_streams_get_keepalive_comments_that_are_never_stored(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(sse_keepalive_seconds=INTERVAL) as h:
        user = make_user()
        # The warm-up run (CrewAI's import) is silent for longer than the interval: its body has keepalives.
        warm = await h.client.post(
            f"/v1/sessions/{await h.new_session(user)}/runs", headers=user.headers, json={"message": "w"}
        )
        assert '"RUN_FINISHED"' in warm.text
        sid = await h.new_session(user)
        hold = h.stub.hold_replies()
        h.stub.enqueue(intent_direct("Here I am."))
        async with served(h.app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            run = http.stream("POST", f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi"})
            async with run as live:
                run_id = live.headers["x-run-id"]
                live_lines = await _until_keepalives(live.aiter_lines(), 2)
                # Events first (the run's start), then, while the model is held, only comments.
                assert live_lines[:2] == [f"id: {run_id}:1", live_lines[1]] and live_lines[1].startswith("data: ")
                assert live_lines[-1] == KEEPALIVE and live_lines[-2] == ""

                follow = http.stream("GET", f"/v1/sessions/{sid}/runs/{run_id}/events", headers=user.headers)
                async with follow as resumed:
                    lines = resumed.aiter_lines()
                    resumed_lines = await _until_keepalives(lines, 2)
                    assert resumed_lines[-1] == KEEPALIVE
                    await hold.release()
                    rest = [line async for line in lines]
                assert any('"RUN_FINISHED"' in line for line in rest), rest

        await h.engine.runs.wait_idle()
        replay = await h.client.get(f"/v1/sessions/{sid}/runs/{run_id}/events", headers=user.headers)
        assert replay.status_code == 200 and KEEPALIVE not in replay.text
        events = parse_sse(replay.text)  # every frame an `id:` and a `data:` line, ids 1..n
        assert events[-1]["type"] == "RUN_FINISHED"


async def test_a_stream_with_events_inside_the_interval_gets_no_keepalive(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(sse_keepalive_seconds=60) as h:
        user = make_user()
        result = await h.run(user, await h.new_session(user), "hello")  # parse_sse refuses any other line
        assert result.events[-1]["type"] == "RUN_FINISHED"
