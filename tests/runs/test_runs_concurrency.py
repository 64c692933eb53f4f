"""Concurrent runs: separate sessions stream separately; a second run on a busy session is refused with 409."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from uuid import uuid4

from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    RunResult,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    stage_of,
    stage_request_text,
    text_messages,
    types,
)
from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall

EXPRESSIONS = {"A": ("17 + 25", "42"), "B": ("6 * 9", "54")}
TOOL_RUN_TYPES = [
    "RUN_STARTED",
    "STEP_STARTED",
    "STEP_FINISHED",
    "STEP_STARTED",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "STEP_FINISHED",
    "STEP_STARTED",
    "TEXT_MESSAGE_START",
]


def tagged_tool_responder(request: RecordedRequest) -> StubReply:
    """Answers by stage for the run whose user message starts with "A:" or "B:", slowly enough to interleave."""
    tag = stage_request_text(request).split(":", 1)[0]
    expression, value = EXPRESSIONS[tag]
    stage = stage_of(request)
    if stage == "intent":
        return intent_needs(f"Compute {expression}.", chunk_chars=8, chunk_delay_seconds=0.01)
    if stage == "execution":
        last = request.messages[-1]
        if last["role"] == "tool":
            assert last["tool_call_id"] == f"call_{tag}"
            assert json.loads(last["content"]) == {"expression": expression, "result": value}
            return execution_done(f"{expression} = {value}", {"result": value}, delay_seconds=0.02)
        arguments = json.dumps({"expression": expression})
        call = StubToolCall(id=f"call_{tag}", name="calculator", arguments=arguments)
        return StubReply(tool_calls=[call], delay_seconds=0.02)
    return organized(f"Run {tag}: {expression} is {value}.", chunk_chars=3, chunk_delay_seconds=0.01)


async def test_two_sessions_run_at_once_with_separate_streams(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sids = {"A": await h.new_session(user), "B": await h.new_session(user)}
    h.stub.responder = tagged_tool_responder

    results: dict[str, RunResult] = dict(
        zip(
            sids,
            await asyncio.gather(*(h.run(user, sids[t], f"{t}: what is {EXPRESSIONS[t][0]}?") for t in sids)),
            strict=True,
        )
    )

    # The runs overlapped: the second run's first call came before the first run's last one.
    tags = [stage_request_text(r)[0] for r in h.stub.requests]
    assert sorted(tags) == ["A"] * 4 + ["B"] * 4
    assert tags.index("B") < len(tags) - 1 - tags[::-1].index("A")
    assert tags.index("A") < len(tags) - 1 - tags[::-1].index("B")

    ids: dict[str, set[str]] = {}
    for tag, result in results.items():
        sid, run_id = sids[tag], result.run_id
        events = result.events
        assert types(events)[: len(TOOL_RUN_TYPES)] == TOOL_RUN_TYPES
        assert types(events)[-4:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "CUSTOM", "RUN_FINISHED"]
        rows = {r.seq: r for r in await h.rows(user, sid)}
        call_row, tool_row, reply_row = rows[2], rows[3], rows[4]
        expression, value = EXPRESSIONS[tag]
        assert reply_row.content == f"Run {tag}: {expression} is {value}."
        assert text_messages(events) == {reply_row.message_id: reply_row.content}
        for event in events:
            if event["type"] in ("RUN_STARTED", "RUN_FINISHED"):
                assert (event["threadId"], event["runId"]) == (sid, run_id)
            if "toolCallId" in event:
                assert event["toolCallId"] == f"call_{tag}"
        assert result.of_type("TOOL_CALL_START")[0]["parentMessageId"] == call_row.message_id
        assert result.of_type("TOOL_CALL_RESULT")[0]["messageId"] == tool_row.message_id
        assert json.loads(result.of_type("TOOL_CALL_RESULT")[0]["content"]) == {
            "expression": expression,
            "result": value,
        }
        usage = (await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)).json()["total"]
        assert result.events[-2]["value"]["cost"] == usage["cost"]
        assert result.events[-2]["value"]["modelCalls"] == usage["model_calls"] == 4
        ids[tag] = {sid, run_id, call_row.message_id, tool_row.message_id, reply_row.message_id, f"call_{tag}"}
        assert (await h.session(user, sid))["status"] == "completed"
    # Nothing of one run (session, run, message or tool-call ids) appears anywhere in the other's stream.
    for tag, result in results.items():
        other = "B" if tag == "A" else "A"
        assert not [i for i in ids[other] if i in result.body]


async def test_second_run_on_a_busy_session_is_409_before_any_stream(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    # Slow first byte: the first run is still waiting for the model while the others arrive.
    h.stub.enqueue(intent_direct("First!", delay_seconds=1.5))
    first = asyncio.create_task(h.run(user, sid, "first"))
    for _ in range(100):
        if (await h.session(user, sid))["status"] == "running":
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the first run never started")

    second = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "second"})
    agui = await h.client.post(
        "/v1/agui",
        headers=user.headers,
        json={"threadId": sid, "runId": "r2", "messages": [{"id": str(uuid4()), "role": "user", "content": "third"}]},
    )

    for response in (second, agui):
        assert response.status_code == 409
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert body == {
            "error": {
                "code": "run_in_progress",
                "message": f"session {sid} already has a run in progress",
                "details": [],
                "request_id": body["error"]["request_id"],
                "error_id": None,
            }
        }
    assert not first.done()
    result = await first
    assert types(result.events)[-1] == "RUN_FINISHED"
    assert text_messages(result.events) == {result.of_type("TEXT_MESSAGE_START")[0]["messageId"]: "First!"}
    assert len(h.stub.requests) == 1
    rows = await h.rows(user, sid)
    assert [(r.seq, r.role, r.content) for r in rows if r.seq > 0] == [(1, "user", "first"), (2, "assistant", "First!")]
    assert (await h.session(user, sid))["status"] == "completed"
