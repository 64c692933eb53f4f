"""`plan_turn` on its own: what a run does with the calls a thread waits for, for each kind of request."""

from __future__ import annotations

import json

import pytest

from agent_runtime.engine.conversation.chat_messages import ToolMessage, UserMessage
from agent_runtime.engine.flow.contracts import IntentResult
from agent_runtime.engine.runs.request.models import ResumeDecision, RunInput
from agent_runtime.engine.runs.request.pending import PendingCall, PendingTurn
from agent_runtime.engine.runs.request.plan import InterruptPendingError, plan_turn

INTENT = IntentResult(route="NEEDS_EXECUTION", intent_summary="x", execution_brief="do it")
TURN = PendingTurn(
    id="p1",
    run_id="r1",
    user_input="do it",
    intent=INTENT,
    calls=[
        PendingCall(id="a1", name="update_bio", arguments='{"bio": "a"}', kind="approval"),
        PendingCall(id="f1", name="show_confetti", arguments="{}", kind="frontend"),
        PendingCall(id="s1", name="calculator", arguments='{"expression": "1+1"}', kind="server"),
        PendingCall(id="a2", name="update_bio", arguments='{"bio": "b"}', kind="approval"),
    ],
)


def test_an_unanswered_interrupt_without_a_new_message_is_a_409() -> None:
    run_input = RunInput(
        resume=[ResumeDecision(interrupt_id="approve-a1", status="resolved")],
        tool_results=[ToolMessage(tool_call_id="f1", content="{}")],
    )
    with pytest.raises(InterruptPendingError):
        plan_turn(run_input, TURN, {})


def test_a_new_message_closes_every_call_in_call_order_keeping_the_clients_result() -> None:
    run_input = RunInput(
        new_messages=[UserMessage(content="never mind")],
        resume=[ResumeDecision(interrupt_id="approve-a2", status="cancelled")],
        tool_results=[ToolMessage(tool_call_id="f1", content='{"shown": true}')],
    )

    plan = plan_turn(run_input, TURN, {})

    assert not plan.continues and plan.decisions == []
    assert [(r.tool_call_id, json.loads(r.content), r.is_error) for r in plan.closing_results] == [
        ("a1", {"error": "not approved: the user sent a new message instead"}, True),
        ("f1", {"shown": True}, False),
        ("s1", {"error": "not run: the user sent a new message instead"}, True),
        ("a2", {"error": "denied by the user"}, True),
    ]
