"""A run's durable event stream in one process: every frame has `id: <run_id>:<seq>`; a client that dropped
the stream resumes with Last-Event-ID (header or query) and gets the rest exactly once; a finished run
replays from the stored log, byte for byte; cancel stops the model and ends the run with outcome
`cancelled`. The model is held by the test (StubHold), never timed: the drop and the cancel happen while it
cannot have finished. (Two processes: tests/test_replicas.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, cny_cost, intent_direct, money, sse_frames, warm_up
from tests.runs.events.test_runs_disconnect import served
from tests.support.sse import frames_of, sse_body

ANSWER = "Streams survive the network: this answer arrives in many small pieces over a few seconds."


def events(frames: list[str]) -> list[dict[str, Any]]:
    return [event for _, _, event in sse_frames(sse_body(frames))]


async def test_a_dropped_stream_resumes_after_its_last_id_and_a_finished_run_replays_byte_for_byte(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    await warm_up(h, user)
    sid = await h.new_session(user)
    hold = h.stub.hold_replies()  # the model answers only once the stream has dropped and been resumed
    h.stub.enqueue(intent_direct(ANSWER, chunk_chars=3))
    async with served(h.app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        async with http.stream("POST", f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi"}) as r:
            run_id = r.headers["x-run-id"]
            first = await frames_of(r.aiter_lines(), 5)  # RUN_STARTED .. the stage's start; then the line drops
        last_id = first[-1].split("\n")[0][len("id: ") :]
        assert last_id == f"{run_id}:5"
        assert (await h.session(user, sid))["status"] == "running"  # held at the model: resumed while it runs

        events_url = f"/v1/sessions/{sid}/runs/{run_id}/events"
        headers = {**user.headers, "Last-Event-ID": last_id}
        async with http.stream("GET", events_url, headers=headers) as resumed:
            assert resumed.status_code == 200 and resumed.headers["content-type"].startswith("text/event-stream")
            await hold.release()
            rest = await frames_of(resumed.aiter_lines())

    whole = first + rest
    frames = sse_frames(sse_body(whole))  # ids 1..n of one run, in order, each once
    assert [seq for _, seq, _ in frames] == list(range(1, len(whole) + 1))
    kinds = [event["type"] for _, _, event in frames]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED" and kinds.count("RUN_FINISHED") == 1
    text = "".join(e["delta"] for _, _, e in frames if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == ANSWER

    await h.engine.runs.wait_idle()  # the run is over and its log stored: replays come from the database
    replay = await h.client.get(f"/v1/sessions/{sid}/runs/{run_id}/events", headers=user.headers)
    assert replay.status_code == 200
    assert replay.text == sse_body(whole)
    tail = await h.client.get(
        f"/v1/sessions/{sid}/runs/{run_id}/events", headers=user.headers, params={"last_event_id": f"{run_id}:3"}
    )
    assert tail.text == sse_body(whole[3:])
    done = await h.client.get(
        f"/v1/sessions/{sid}/runs/{run_id}/events", headers={**user.headers, "Last-Event-ID": f"{run_id}:{len(whole)}"}
    )
    assert (done.status_code, done.text) == (200, "")


async def test_resume_and_cancel_refuse_bad_ids_and_other_users_runs(h: Harness, make_user: Callable[[], User]) -> None:
    user, other = make_user(), make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("done"))
    run_id = (await h.run(user, sid, "hi")).run_id
    url = f"/v1/sessions/{sid}/runs/{run_id}"

    for bad in ("12", f"{run_id}", f"{run_id}:x", f"{run_id}:-1", "not-a-uuid:3", f"{sid}:1"):
        response = await h.client.get(f"{url}/events", headers={**user.headers, "Last-Event-ID": bad})
        assert response.status_code == 422, (bad, response.text)
        error = response.json()["error"]
        assert error["code"] == "validation_error" and error["details"][0]["loc"] == ["header", "Last-Event-ID"]
    by_query = await h.client.get(f"{url}/events", headers=user.headers, params={"last_event_id": "7"})
    assert by_query.status_code == 422 and by_query.json()["error"]["details"][0]["loc"] == ["query", "last_event_id"]

    for response in (
        await h.client.get(f"{url}/events", headers=other.headers),
        await h.client.post(f"{url}/cancel", headers=other.headers),
        await h.client.get(f"/v1/sessions/{sid}/runs/{sid}/events", headers=user.headers),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    cancel = await h.client.post(f"{url}/cancel", headers=user.headers)
    assert (cancel.status_code, cancel.json()) == (202, {"id": run_id, "status": "completed"})  # over: a no-op

    # A browser EventSource cannot send headers: the token may come as ?access_token= on this endpoint only.
    token = user.headers["Authorization"].removeprefix("Bearer ")
    with_header = await h.client.get(f"{url}/events", headers=user.headers)
    by_param = await h.client.get(f"{url}/events", params={"access_token": token})
    assert (by_param.status_code, by_param.text) == (200, with_header.text)
    assert (await h.client.get(f"{url}/events", params={"access_token": token + "x"})).status_code == 401
    assert (await h.client.get(f"{url}/events")).status_code == 401
    assert (await h.client.get(f"/v1/sessions/{sid}/runs", params={"access_token": token})).status_code == 401


async def test_cancel_closes_the_model_request_keeps_the_partial_answer_and_ends_with_outcome_cancelled(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    # The model is held mid-answer and LiteLLM's own timeout is far away: only the cancel can end this run.
    async with make_harness(llm_timeout_seconds=120, shutdown_grace_seconds=0) as h:
        user = make_user()
        await warm_up(h, user)
        sid = await h.new_session(user)
        hold = h.stub.hold_replies()
        # The reply's start and 39 chunks of 2 characters: the JSON up to the answer (48 characters), then the
        # first pieces of the answer.
        await hold.allow(40)
        h.stub.enqueue(intent_direct(ANSWER * 4, chunk_chars=2))
        run_url = f"/v1/sessions/{sid}/runs"
        async with (
            served(h.app) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=30) as http,
            http.stream("POST", run_url, headers=user.headers, json={"message": "hi"}) as r,
        ):
            run_id = r.headers["x-run-id"]
            lines = r.aiter_lines()
            seen = await frames_of(lines, 8)  # the snapshots, the stage, then the first answer pieces are out
            cancel = await http.post(f"{run_url}/{run_id}/cancel", headers=user.headers)
            async with asyncio.timeout(15):  # a cancel that does not stop the run leaves it held forever
                rest = await frames_of(lines)
        assert (cancel.status_code, cancel.json()) == (202, {"id": run_id, "status": "running"})
        async with asyncio.timeout(30):
            await hold.release()  # the stub writes the next chunk, into the connection the run has closed
            await h.stub.wait_for_client_close()  # the provider request was closed: no more tokens generated

        streamed = events(seen + rest)
        finished = streamed[-1]
        assert finished["type"] == "RUN_FINISHED" and finished["outcome"] == {"type": "cancelled"}, finished
        shown = "".join(e["delta"] for e in streamed if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert shown and (ANSWER * 4).startswith(shown) and shown != ANSWER * 4

        await h.engine.runs.wait_idle()
        messages = await h.visible(user, sid)
        assert [(m["role"], m["content"]) for m in messages] == [("user", "hi"), ("assistant", shown)]
        assert messages[1]["metadata"]["partial"] is True
        assert (messages[1]["input_tokens"], messages[1]["output_tokens"], messages[1]["cost"]) == (
            0,
            0,
            "0.0000000000",
        )
        # The provider bills what it generated although no usage came back: the cut call is an audit row with its
        # usage estimated (the prompt counted here, the output as far as it streamed), in the ledger and budgets.
        (cut,) = [r for r in await h.rows(user, sid) if r.seq < 0 and r.metadata.model_dump().get("estimated")]
        assert (cut.metadata.model_dump()["stage"], cut.metadata.model_dump()["error"]) == (
            "intent",
            "interrupted: cancelled",
        )
        assert cut.input_tokens > 1000 and 0 < cut.output_tokens < 200
        assert cut.cost == cny_cost(cut.input_tokens, cut.output_tokens)  # every prompt token priced as a miss
        total = (await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)).json()["total"]
        assert (total["cost"], total["input_tokens"]) == (money(cut.cost), cut.input_tokens)
        assert (await h.session(user, sid))["status"] == "completed"
        runs = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
        assert [(r["id"], r["status"], r["error_code"]) for r in runs] == [(run_id, "cancelled", None)]
        again = await h.client.post(f"/v1/sessions/{sid}/runs/{run_id}/cancel", headers=user.headers)
        assert (again.status_code, again.json()) == (202, {"id": run_id, "status": "cancelled"})
        replay = await h.client.get(f"/v1/sessions/{sid}/runs/{run_id}/events", headers=user.headers)
        assert replay.text == sse_body(seen + rest)


async def test_events_past_retention_are_deleted_by_the_sweep_and_a_resume_says_410(
    h: Harness, make_harness: Any, make_user: Callable[[], User]
) -> None:
    async with make_harness(run_events_retention_seconds=0) as short:
        user = make_user()
        sid = await short.new_session(user)
        short.stub.enqueue(intent_direct("soon forgotten"))
        run_id = (await short.run(user, sid, "hi")).run_id
        await short.engine.runs.wait_idle()
        await short.engine.runs.leases.sweep_once()
        response = await short.client.get(f"/v1/sessions/{sid}/runs/{run_id}/events", headers=user.headers)
    assert response.status_code == 410
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (
        "events_expired",
        f"the events of run {run_id} are past their retention and were deleted",
    )
    assert json.loads(json.dumps(error))["request_id"]
