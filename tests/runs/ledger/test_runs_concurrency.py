"""Concurrent runs: separate sessions stream separately; a second run on a busy session is refused with 409."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from uuid import uuid4

from tests.conftest import User
from tests.runs.conftest import (
    MODEL,
    RUN_END,
    RUN_START,
    STAGE_START,
    Harness,
    RunResult,
    cny_cost,
    execution_done,
    intent_direct,
    intent_needs,
    money,
    organized,
    stage_of,
    stage_request_text,
    text_messages,
    types,
    usage,
    wait_for_model_call,
)
from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall, StubUsage

EXPRESSIONS = {"A": ("17 + 25", "42"), "B": ("6 * 9", "54")}
# Each run's calls carry their own usage (prompt, completion, cache hit) plus the call's index i (0 intent,
# 1 tool call, 2 execution result, 3 organization): a row billed to the wrong session shows at once.
BASE_USAGE = {"A": (1000, 10, 400), "B": (5000, 50, 3000)}
TOOL_RUN_TYPES = [
    *RUN_START,
    *STAGE_START,
    "STEP_FINISHED",
    *STAGE_START,
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "STEP_FINISHED",
    *STAGE_START,
    "TEXT_MESSAGE_START",
]


def call_usage(tag: str, index: int) -> StubUsage:
    prompt, completion, hit = BASE_USAGE[tag]
    return usage(prompt + index, completion + index, hit + index)


def tagged_tool_responder(request: RecordedRequest) -> StubReply:
    """Answers by stage for the run whose user message starts with "A:" or "B:", slowly enough to interleave."""
    tag = stage_request_text(request).split(":", 1)[0]
    expression, value = EXPRESSIONS[tag]
    stage = stage_of(request)
    if stage == "intent":
        return intent_needs(f"Compute {expression}.", chunk_chars=8, chunk_delay_seconds=0.01, usage=call_usage(tag, 0))
    if stage == "execution":
        last = request.messages[-1]
        if last["role"] == "tool":
            assert last["tool_call_id"] == f"call_{tag}"
            assert json.loads(last["content"]) == {"expression": expression, "result": value}
            return execution_done(
                f"{expression} = {value}", {"result": value}, delay_seconds=0.02, usage=call_usage(tag, 2)
            )
        arguments = json.dumps({"expression": expression})
        call = StubToolCall(id=f"call_{tag}", name="calculator", arguments=arguments)
        return StubReply(tool_calls=[call], delay_seconds=0.02, usage=call_usage(tag, 1))
    return organized(
        f"Run {tag}: {expression} is {value}.", chunk_chars=3, chunk_delay_seconds=0.01, usage=call_usage(tag, 3)
    )


def expected_billing(tag: str) -> list[tuple[Any, ...]]:
    """Every stored row of run `tag` as (seq, role, kind, stage, input, output, cached, cost, cost_source,
    currency): the four model calls billed from that run's own usage, the rest unbilled."""

    def billed(index: int) -> tuple[int, int, int, str, str]:
        u = call_usage(tag, index)
        cost = cny_cost(u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens)
        return u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens, money(cost), "custom_pricing"

    unbilled = (0, 0, None, money(Decimal(0)), None)
    return [
        (1, "user", "user_input", None, *unbilled, "CNY"),
        (2, "assistant", "tool_call", "execution", *billed(1), "CNY"),
        (3, "tool", "tool_result", None, *unbilled, "CNY"),
        (4, "assistant", "assistant_output", "organization", *billed(3), "CNY"),
        (-1, "assistant", "audit", "intent", *billed(0), "CNY"),
        (-2, "assistant", "audit", "execution", *billed(2), "CNY"),
        (-3, "assistant", "audit", "organization", *unbilled, "CNY"),
    ]


def expected_run_cost(tag: str) -> dict[str, Any]:
    """The run's CUSTOM run_cost value, summed by hand from that run's four calls."""
    calls = [call_usage(tag, i) for i in range(4)]
    cost = sum((cny_cost(u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens) for u in calls), Decimal(0))
    return {
        "currency": "CNY",
        "cost": money(cost),
        "inputTokens": sum(u.prompt_tokens for u in calls),
        "outputTokens": sum(u.completion_tokens for u in calls),
        "cachedInputTokens": sum(u.cache_hit_tokens for u in calls),
        "modelCalls": 4,
        "demo": False,
    }


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
        assert types(events)[-5:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", *RUN_END]
        stored = await h.rows(user, sid)
        rows = {r.seq: r for r in stored}
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
        # Cost attribution: each session's rows carry exactly its own run's tokens, cache split and cost.
        billing = [
            (
                r.seq,
                r.role,
                r.metadata.kind,
                getattr(r.metadata, "stage", None),
                r.input_tokens,
                r.output_tokens,
                getattr(r.metadata, "cached_tokens", None),
                money(r.cost),
                getattr(r.metadata, "cost_source", None),
                r.currency,
            )
            for r in stored
        ]
        assert billing == expected_billing(tag)
        assert {getattr(r.metadata, "model", None) for r in stored if r.input_tokens} == {MODEL}
        run_cost = expected_run_cost(tag)
        assert result.events[-3] == {"type": "CUSTOM", "name": "run_cost", "value": run_cost}
        session_usage = (await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)).json()
        assert session_usage["total"] == {
            "input_tokens": run_cost["inputTokens"],
            "output_tokens": run_cost["outputTokens"],
            "cached_tokens": run_cost["cachedInputTokens"],
            "cost": run_cost["cost"],
            "currency": "CNY",
            "model_calls": 4,
        }
        ids[tag] = {sid, run_id, call_row.message_id, tool_row.message_id, reply_row.message_id, f"call_{tag}"}
        assert (await h.session(user, sid))["status"] == "completed"
    # Nothing of one run (session, run, message or tool-call ids) appears anywhere in the other's stream.
    for tag, result in results.items():
        other = "B" if tag == "A" else "A"
        assert not [i for i in ids[other] if i in result.body]


async def test_second_run_on_a_busy_session_is_409_before_any_stream(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    # The model is held: the first run is waiting for it for as long as the test needs.
    hold = h.stub.hold_replies()
    h.stub.enqueue(intent_direct("First!"))
    first = asyncio.create_task(h.run(user, sid, "first", message_id="first-msg"))
    # Up to 30 s: run alone, this test's first run also loads CrewAI and LiteLLM before calling the model.
    await wait_for_model_call(h.stub)
    session = await h.session(user, sid)
    run_id = session["state_snapshot"]["run_id"]
    assert (session["status"], session["state_snapshot"]) == (
        "running",
        {"status": "running", "run_id": run_id, "error_id": None},
    )

    # The model call is in flight and unanswered: the user's message is already stored, and nothing else is.
    page = (await h.client.get(f"/v1/sessions/{sid}/messages", headers=user.headers)).json()
    stored = page["items"][0]
    assert page == {
        "items": [
            {
                "id": stored["id"],
                "session_id": sid,
                "message_id": "first-msg",
                "seq": 1,
                "role": "user",
                "content": "first",
                "metadata": {"kind": "user_input", "run_id": run_id},
                "input_tokens": 0,
                "output_tokens": 0,
                "cost": "0.0000000000",
                "currency": "CNY",
                "created_at": stored["created_at"],
            }
        ],
        "total": 1,
        "limit": 20,
        "offset": 0,
    }
    assert [(r.seq, r.role, r.content) for r in await h.rows(user, sid)] == [(1, "user", "first")]
    assert not first.done() and len(h.stub.requests) == 1

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
    await hold.release()
    result = await first
    assert result.run_id == run_id
    assert types(result.events)[-1] == "RUN_FINISHED"
    assert text_messages(result.events) == {result.of_type("TEXT_MESSAGE_START")[0]["messageId"]: "First!"}
    assert len(h.stub.requests) == 1
    rows = await h.rows(user, sid)
    assert [(r.seq, r.role, r.content) for r in rows if r.seq > 0] == [(1, "user", "first"), (2, "assistant", "First!")]
    assert (await h.session(user, sid))["status"] == "completed"
