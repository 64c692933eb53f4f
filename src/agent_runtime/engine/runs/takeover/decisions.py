"""What a taken-over run does with the tool calls its turn asked for whose results were never stored.

Such a call may have run, in part or whole, in the process that died: a tool whose definition says it is idempotent
runs again (with the same idempotency key: engine/flow/tools/call_identity.py); any other gets a result saying its
outcome is unknown, so it never runs twice. An approval or frontend call the run had not been answered yet was never
run: its result says so and the model may ask again; one whose approval came with this run's input counts as the
user's decision, never asked again (it runs again only when idempotent, as any other).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agent_runtime.engine.conversation.chat_messages import AssistantMessage, ChatMessage, ToolMessage, UserMessage
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runs.request.approval import read_approval
from agent_runtime.engine.runs.request.models import RunInput
from agent_runtime.engine.runs.request.pending import CallKind, PendingCall
from agent_runtime.engine.runs.request.plan import DENIED, CallDecision
from agent_runtime.engine.sessions.models import approval_interrupt_id

OUTCOME_UNKNOWN = json.dumps(
    {
        "error": "outcome unknown: the run was interrupted while this tool ran, and it is not run twice; "
        "tell the user it may or may not have happened"
    }
)
NOT_ASKED = json.dumps({"error": "not run: the run was interrupted before this call was answered"})


def _unanswered(thread: Sequence[ChatMessage]) -> list[PendingCall]:
    """The tool calls after the thread's last user message that have no result."""
    last_user = max((i for i, m in enumerate(thread) if isinstance(m, UserMessage)), default=-1)
    turn = thread[last_user + 1 :]
    answered = {m.tool_call_id for m in turn if isinstance(m, ToolMessage)}
    return [
        PendingCall(id=call.id, name=call.name, arguments=call.arguments, kind="server")
        for m in turn
        if isinstance(m, AssistantMessage)
        for call in m.tool_calls
        if call.id not in answered
    ]


def takeover_decisions(
    thread: Sequence[ChatMessage],
    run_input: RunInput,
    tools: Mapping[str, Tool[Any]],
    *,
    approval: Collection[str],
) -> list[CallDecision]:
    answers = {d.interrupt_id: d for d in run_input.resume}
    frontend = {tool.name for tool in run_input.frontend_tools}
    decisions = []
    for call in _unanswered(thread):
        kind: CallKind = "approval" if call.name in approval else "frontend" if call.name in frontend else "server"
        call = call.model_copy(update={"kind": kind})
        tool = tools.get(call.name)
        arguments = call.arguments
        if kind == "approval":
            answer = answers.get(approval_interrupt_id(call.id))
            if answer is None:
                decisions.append(_answered(call, NOT_ASKED))
                continue
            given = read_approval(answer.payload, tool, []) if answer.status == "resolved" else None
            if given is None or not given.approved:
                decisions.append(_answered(call, DENIED))
                continue
            arguments = given.arguments or arguments
        elif kind == "frontend":
            decisions.append(_answered(call, NOT_ASKED))
            continue
        if tool is not None and tool.idempotent:
            decisions.append(CallDecision(call=call, action="run", arguments=arguments))
        else:
            decisions.append(_answered(call, OUTCOME_UNKNOWN))
    return decisions


def _answered(call: PendingCall, content: str) -> CallDecision:
    return CallDecision(call=call, action="answer", arguments=call.arguments, content=content)
