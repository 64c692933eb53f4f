"""Stage answers that do not match the stage contract: JSON repair turns, audit rows, RUN_ERROR when exhausted."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    MODEL,
    NO_PRICE,
    PEAK_PRICE,
    RUN_END,
    RUN_START,
    STAGE_START,
    Harness,
    cny_cost,
    execution_done,
    intent_direct,
    intent_needs,
    money,
    organized,
    row_dict,
    run_cost,
    run_error_id,
    stage_of,
    text_messages,
    types,
    usage,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

REJECTED = "rejected: did not match the stage contract"


def _audit_row(
    seq: int, run_id: str, content: str, *, error: str | None, billed: tuple[int, int, int] | None
) -> dict[str, Any]:
    prompt, completion, hit = billed or (0, 0, 0)
    return {
        "seq": seq,
        "role": "assistant",
        "content": content,
        "metadata": {
            "kind": "audit",
            "stage": "intent",
            "run_id": run_id,
            "model": MODEL,
            "cost_source": "custom_pricing" if billed else None,
            "cached_tokens": hit if billed else None,
            **(PEAK_PRICE if billed else NO_PRICE),
            "raw_output": content,
            "error": error,
            "estimated": None,
            "reasoning": None,
        },
        "input_tokens": prompt,
        "output_tokens": completion,
        "cost": money(cny_cost(prompt, completion, hit)),
        "currency": "CNY",
    }


def _without_ids(rows: list[Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row_dict(r).items() if k != "message_id"} for r in rows]


async def test_invalid_json_once_is_repaired_and_the_rejected_attempt_is_billed(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    prose = "Sure! I would say hello back."
    # DeepSeek's JSON mode replaces output that is not JSON with spaces (guides/json_mode): a blank answer.
    bad = " " * len(prose)
    h.stub.enqueue(
        StubReply(content=prose, usage=usage(500, 10)),
        intent_direct("Hello again!", usage=usage(700, 20, 500)),
    )

    result = await h.run(user, sid, "hello")

    deltas = result.of_type("TEXT_MESSAGE_CONTENT")
    assert types(result.events) == [
        *RUN_START,
        *STAGE_START,
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * len(deltas),
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        *RUN_END,
    ]
    assert "".join(d["delta"] for d in deltas) == "Hello again!"
    # The repair turn: the same stage request, the rejected answer, then what was wrong with it.
    first, second = h.stub.requests
    assert second.messages[: len(first.messages)] == first.messages
    assert second.messages[len(first.messages)] == {"role": "assistant", "content": bad}
    repair = second.messages[len(first.messages) + 1]
    assert repair == {
        "role": "user",
        "content": "Your previous answer could not be used: it was blank. Answer again with only the IntentResult "
        "JSON object (the schema titled IntentResult in the system prompt).",
    }
    assert len(second.messages) == len(first.messages) + 2
    assert [stage_of(r) for r in h.stub.requests] == ["intent", "intent"]

    run_id = result.run_id
    rows = await h.rows(user, sid)
    good = intent_direct("Hello again!").content
    assert _without_ids(rows)[1:] == [
        {
            "seq": 2,
            "role": "assistant",
            "content": "Hello again!",
            "metadata": {
                "kind": "assistant_output",
                "run_id": run_id,
                "stage": "intent",
                "model": MODEL,
                "cost_source": "custom_pricing",
                "cached_tokens": 500,
                **PEAK_PRICE,
                "demo": False,
                "message_id": deltas[0]["messageId"],
                "partial": None,
                "reasoning_content": None,
            },
            "input_tokens": 700,
            "output_tokens": 20,
            "cost": money(cny_cost(700, 20, 500)),
            "currency": "CNY",
        },
        _audit_row(-1, run_id, bad, error=REJECTED, billed=(500, 10, 0)),
        _audit_row(-2, run_id, good, error=None, billed=None),
    ]
    assert run_cost(result.events)["cost"] == money(cny_cost(500, 10) + cny_cost(700, 20, 500))
    assert run_cost(result.events)["modelCalls"] == 2
    assert (await h.session(user, sid))["status"] == "completed"


ROUTE_SWITCH = [
    intent_needs("Compute 17 + 25."),
    execution_done("17 + 25 = 42", {"result": "42"}),
    organized("17 + 25 is 42."),
]


@pytest.mark.parametrize(
    ("retry", "answer"),
    [(ROUTE_SWITCH, "17 + 25 is 42."), ([intent_direct("It is 42.")], "It is 42.")],
    ids=["retry-needs-execution", "retry-direct-other-text"],
)
async def test_text_streamed_by_a_rejected_attempt_is_not_mixed_into_the_answer(
    h: Harness, make_user: Callable[[], User], retry: list[StubReply], answer: str
) -> None:
    """A rejected DIRECT_EXECUTION attempt streams its assistant_text before it is found invalid (here:
    intent_summary is missing); the retry answers otherwise. Streamed text cannot be retracted, but the
    message carrying the stored reply's id must hold exactly the stored reply, in a well-formed stream."""
    user = make_user()
    sid = await h.new_session(user)
    rejected = json.dumps({"route": "DIRECT_EXECUTION", "assistant_text": "Let me guess: 41."})
    h.stub.enqueue(StubReply(content=rejected), *retry)

    result = await h.run(user, sid, "What is 17 + 25?")

    assert types(result.events)[-1] == "RUN_FINISHED"
    reply = next(r for r in await h.rows(user, sid) if r.seq > 0 and r.role == "assistant" and r.content)
    assert reply.content == answer
    messages = text_messages(result.events)
    assert messages[reply.message_id] == answer
    assert messages == {m: t for m, t in messages.items() if m == reply.message_id or t == "Let me guess: 41."}


async def test_invalid_json_exhausted_fails_the_run_and_bills_every_attempt(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    attempts = [("no JSON here", (100, 5, 0)), ("still no JSON", (200, 6, 100)), ("[1, 2, 3]", (300, 7, 200))]
    h.stub.enqueue(*(StubReply(content=text, usage=usage(*u)) for text, u in attempts))

    result = await h.run(user, sid, "hello")

    assert result.status == 200
    assert len(h.stub.requests) == 3  # stage_max_json_retries = 2: three attempts in all
    assert types(result.events) == [*RUN_START, *STAGE_START, "STATE_DELTA", "STEP_FINISHED", "RUN_ERROR"]
    error = result.events[-1]
    message = "stage 'intent': the model's answer did not match IntentResult after 3 attempts"
    error_id = run_error_id(error, "invalid_model_output", message)

    session = await h.session(user, sid)
    assert (session["status"], session["error_id"]) == ("failed", error_id)
    assert session["state_snapshot"] == {"status": "failed", "run_id": result.run_id, "error_id": error_id}
    rows = await h.rows(user, sid)
    assert [(r.seq, r.role, r.content) for r in rows if r.seq > 0] == [(1, "user", "hello")]
    reason = f"invalid_model_output: {message}"
    # What came back: DeepSeek's JSON mode blanks output that is not JSON; the array is JSON (of the wrong shape).
    answered = [" " * len("no JSON here"), " " * len("still no JSON"), "[1, 2, 3]"]
    assert _without_ids([r for r in rows if r.seq < 0]) == [
        _audit_row(-(i + 1), result.run_id, text, error=reason, billed=u)
        for i, (text, (_, u)) in enumerate(zip(answered, attempts, strict=True))
    ]
    totals = (await h.client.get(f"/v1/sessions/{sid}/usage", headers=user.headers)).json()["total"]
    assert totals == {
        "input_tokens": 600,
        "output_tokens": 18,
        "cached_tokens": 300,
        "cost": money(sum((cny_cost(*u) for _, u in attempts), Decimal(0))),
        "currency": "CNY",
        "model_calls": 3,
    }


async def test_prose_after_a_tool_result_gets_the_contract_asked_for_without_tools(
    h: Harness, make_user: Callable[[], User]
) -> None:
    """A model that answers in prose after its tool result (DeepSeek's JSON mode is off next to callable tools) is
    asked for the contract with the tools it may not call: it cannot repeat the call, and the run finishes."""
    user = make_user()
    sid = await h.new_session(user)
    call = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "2+2"}')
    h.stub.enqueue(
        intent_needs("Compute 2+2."),
        StubReply(tool_calls=[call]),
        StubReply(content="The answer is 4."),  # prose where ExecutionResult was due
        execution_done("2+2=4", {"result": "4"}),
        organized("It is 4."),
    )

    result = await h.run(user, sid, "what is 2+2?")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    stages = [(stage_of(r), r.body["tool_choice"], "response_format" in r.body) for r in h.stub.requests]
    assert stages == [
        ("intent", "none", True),
        ("execution", "auto", False),
        ("execution", "auto", False),
        ("execution", "none", True),  # the repair: no tool can be called, JSON mode on
        ("organization", "none", True),
    ]
    repair = h.stub.requests[3].messages[-1]["content"]
    assert repair.startswith("Your previous answer could not be used: ") and "ExecutionResult JSON object" in repair
    assert [m["content"] for m in await h.visible(user, sid) if m["role"] == "assistant" and m["content"]] == [
        "It is 4."
    ]
