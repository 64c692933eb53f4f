"""DIRECT_EXECUTION: the intent stage answers, in one model call, streamed token by token."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import User
from tests.runs.conftest import (
    MODEL,
    NO_PRICE,
    PEAK_PRICE,
    Harness,
    cny_cost,
    intent_direct,
    row_dict,
    run_cost,
    types,
    usage,
)


async def test_direct_route_is_one_streamed_call_billed_on_the_reply(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    answer = "Hello there, friend! Nice to meet you."
    h.stub.enqueue(intent_direct(answer, usage=usage(1000, 200, 600), chunk_chars=5))

    result = await h.run(user, sid, "hi, who are you?")

    assert result.status == 200
    assert len(h.stub.requests) == 1
    run_id = result.run_id
    events = result.events
    deltas = result.of_type("TEXT_MESSAGE_CONTENT")
    assert len(deltas) >= 2
    assert types(events) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
        "STEP_STARTED",
        "STATE_DELTA",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * len(deltas),
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "CUSTOM",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    message_id = events[5]["messageId"]
    user_message_id = (await h.rows(user, sid))[0].message_id
    assert events[0] == {"type": "RUN_STARTED", "threadId": sid, "runId": run_id, "protocolVersion": "1.0"}
    # The thread as stored (a fresh page rebuilds it from the stream alone), then the run state.
    assert events[1] == {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [{"id": user_message_id, "role": "user", "content": "hi, who are you?"}],
    }
    run_state = {
        "runId": run_id,
        "status": "running",
        "stage": None,
        "route": None,
        "pendingToolCallIds": [],
        "interrupts": [],
    }
    assert events[2] == {"type": "STATE_SNAPSHOT", "snapshot": {"agentRuntime": run_state}}
    assert events[3] == {"type": "STEP_STARTED", "stepName": "intent"}
    assert events[4] == {
        "type": "STATE_DELTA",
        "delta": [{"op": "replace", "path": "/agentRuntime/stage", "value": "intent"}],
    }
    assert events[5] == {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}
    assert all(d["messageId"] == message_id for d in deltas)
    assert "".join(d["delta"] for d in deltas) == answer
    assert events[-5] == {"type": "TEXT_MESSAGE_END", "messageId": message_id}
    assert events[-4] == {"type": "STEP_FINISHED", "stepName": "intent"}
    assert events[-2] == {
        "type": "STATE_DELTA",
        "delta": [
            {"op": "replace", "path": "/agentRuntime/status", "value": "completed"},
            {"op": "replace", "path": "/agentRuntime/stage", "value": None},
            {"op": "replace", "path": "/agentRuntime/route", "value": "DIRECT_EXECUTION"},
        ],
    }
    # At peak, 600 cache hits * 0.04 + 400 misses * 2 + 200 output * 8 = 2424 CNY per million tokens.
    expected_cost = cny_cost(1000, 200, 600)
    assert str(expected_cost) == "0.002424"
    assert events[-3] == {
        "type": "CUSTOM",
        "name": "run_cost",
        "value": {
            "currency": "CNY",
            "cost": "0.0024240000",
            "inputTokens": 1000,
            "outputTokens": 200,
            "cachedInputTokens": 600,
            "modelCalls": 1,
            "demo": False,
        },
    }
    assert events[-1] == {
        "type": "RUN_FINISHED",
        "threadId": sid,
        "runId": run_id,
        "usage": [
            {
                "provider": "deepseek",
                "model": MODEL,
                "inputTokens": 1000,
                "outputTokens": 200,
                "totalTokens": 1200,
                "cachedInputTokens": 600,
            }
        ],
    }

    rows = await h.rows(user, sid)
    raw = h.stub.requests[0]
    assert raw.body["stream"] is True
    raw_intent = intent_direct(answer).content
    assert [row_dict(r) for r in rows] == [
        {
            "message_id": rows[0].message_id,
            "seq": 1,
            "role": "user",
            "content": "hi, who are you?",
            "metadata": {"kind": "user_input", "run_id": run_id},
            "input_tokens": 0,
            "output_tokens": 0,
            "cost": "0.0000000000",
            "currency": "CNY",
        },
        {
            "message_id": message_id,
            "seq": 2,
            "role": "assistant",
            "content": answer,
            "metadata": {
                "kind": "assistant_output",
                "run_id": run_id,
                "stage": "intent",
                "model": MODEL,
                "cost_source": "custom_pricing",
                "cached_tokens": 600,
                **PEAK_PRICE,
                "demo": False,
                "message_id": message_id,
                "partial": None,
                "reasoning_content": None,
            },
            "input_tokens": 1000,
            "output_tokens": 200,
            "cost": "0.0024240000",
            "currency": "CNY",
        },
        {
            # The raw stage JSON, kept for audit; its usage is on the reply, so it bills nothing.
            "message_id": rows[2].message_id,
            "seq": -1,
            "role": "assistant",
            "content": raw_intent,
            "metadata": {
                "kind": "audit",
                "stage": "intent",
                "run_id": run_id,
                "model": MODEL,
                "cost_source": None,
                "cached_tokens": None,
                **NO_PRICE,
                "raw_output": raw_intent,
                "error": None,
                "estimated": None,
                "reasoning": None,
            },
            "input_tokens": 0,
            "output_tokens": 0,
            "cost": "0.0000000000",
            "currency": "CNY",
        },
    ]

    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("completed", None)
    assert session["state_snapshot"] == {"status": "completed", "run_id": run_id, "error_id": None}

    usage_response = await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)
    assert usage_response.status_code == 200
    total = usage_response.json()["total"]
    announced = run_cost(events)
    assert total == {
        "input_tokens": announced["inputTokens"],
        "output_tokens": announced["outputTokens"],
        "cached_tokens": announced["cachedInputTokens"],
        "cost": announced["cost"],
        "currency": announced["currency"],
        "model_calls": announced["modelCalls"],
    }
    assert usage_response.json()["by_stage"] == [{"stage": "intent", **total}]


async def test_visible_messages_show_the_turn(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hi!"))
    result = await h.run(user, sid, "hello", message_id="client-msg-1")
    assert result.events[-1]["type"] == "RUN_FINISHED"
    visible = await h.visible(user, sid)
    assert [(m["seq"], m["role"], m["message_id"], m["content"]) for m in visible] == [
        (1, "user", "client-msg-1", "hello"),
        (2, "assistant", result.of_type("TEXT_MESSAGE_START")[0]["messageId"], "Hi!"),
    ]
    session = await h.session(user, sid)
    assert session["title"] == "hello"
