"""Whether a run may start, given what the thread waits for, and what it does with the waiting tool calls.

- Nothing pending: a new turn (new user messages required; resume entries and tool results are refused), or a
  regeneration of the last one (request/regenerate.py), which is refused (409) while anything is pending.
- A new user message always starts a new turn, whatever is pending, so a thread never refuses every message
  (a client that cannot answer, or whose answer was refused, can always go on). The suspended reply's calls
  are closed first, in call order: a frontend call with the client's result when the same request carries
  one (CopilotKit sends the result with the next message) else `{"error": "the client did not run this
  tool"}`; an approval call with `{"error": "not approved: ..."}` (or "denied by the user" for a cancelled
  resume entry); a granted approval together with a new message is the one 422 (two turns in one request).
- Otherwise the run continues the suspended turn: every interrupt must be answered by a resume entry (else
  409 `interrupt_pending`), approved calls run (with the user's edited arguments, validated against the
  tool's schema), denied ones get `{"error": "denied by the user"}`, and every frontend call needs a result.
Everything is checked before the run starts, so a refused request leaves nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent_runtime.engine.conversation.chat_messages import ToolMessage
from agent_runtime.engine.errors import ConflictError, ErrorDetail, ValidationFailedError
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runs.request.approval import read_approval
from agent_runtime.engine.runs.request.models import RunInput
from agent_runtime.engine.runs.request.pending import PendingCall, PendingTurn
from agent_runtime.engine.runs.request.regenerate import refuse_pending

DENIED = json.dumps({"error": "denied by the user"})
NOT_RUN_BY_CLIENT = json.dumps({"error": "the client did not run this tool"})
NOT_APPROVED = json.dumps({"error": "not approved: the user sent a new message instead"})
NOT_RUN_MOVED_ON = json.dumps({"error": "not run: the user sent a new message instead"})


class InterruptPendingError(ConflictError):
    code = "interrupt_pending"


class NothingPendingError(ConflictError):
    """A resume entry that answers no interrupt of the thread as it is now (a state conflict, not bad input)."""

    code = "interrupt_unknown"


class CallDecision(BaseModel):
    """What happens to one call of the suspended model reply when the turn goes on."""

    model_config = ConfigDict(frozen=True)

    call: PendingCall
    # answer: not run, `content` is its result (a takeover's call whose outcome is unknown: engine/runs/takeover/)
    action: Literal["run", "deny", "client_result", "answer"]
    arguments: str
    edited: bool = False
    content: str | None = None


class TurnPlan(BaseModel):
    pending: PendingTurn | None
    continues: bool
    decisions: list[CallDecision]
    closing_results: list[ToolMessage]


def _invalid(message: str, loc: list[str | int], msg: str) -> ValidationFailedError:
    return ValidationFailedError(message, details=[ErrorDetail(loc=loc, msg=msg)])


def _approvals(
    run_input: RunInput, pending: PendingTurn, tools: Mapping[str, Tool[Any]], *, complete: bool = True
) -> list[CallDecision]:
    """The resume entries as decisions; `complete`: every pending interrupt must have one (else 409)."""
    by_id = {call.interrupt_id: call for call in pending.of_kind("approval")}
    decided: dict[str, CallDecision] = {}
    for index, decision in enumerate(run_input.resume):
        call = by_id.get(decision.interrupt_id)
        if call is None or call.id in decided:
            raise NothingPendingError(
                "unknown interrupt",
                details=[ErrorDetail(loc=["body", "resume", index, "interruptId"], msg="answers no pending interrupt")],
            )
        loc: list[str | int] = ["body", "resume", index, "payload"]
        answer = read_approval(decision.payload, tools.get(call.name), loc) if decision.status == "resolved" else None
        if answer is None or not answer.approved:
            decided[call.id] = CallDecision(call=call, action="deny", arguments=call.arguments)
            continue
        edited = answer.arguments
        arguments = edited if edited is not None else call.arguments
        decided[call.id] = CallDecision(call=call, action="run", arguments=arguments, edited=edited is not None)
    missing = [call.interrupt_id for call in by_id.values() if call.id not in decided]
    if missing and complete:
        raise InterruptPendingError(
            "the thread waits for approvals: answer every pending interrupt with a resume entry",
            details=[ErrorDetail(loc=["body", "resume"], msg=f"missing: {', '.join(missing)}")],
        )
    return list(decided.values())


def _closing(pending: PendingTurn, results: list[ToolMessage], denied: set[str]) -> list[ToolMessage]:
    """The user moved on with a new message: every call of the suspended reply gets its result, in call order
    (the provider needs each call answered): the client's result where it sent one, else an error result
    saying why the call did not run, which the model sees."""
    given = {result.tool_call_id: result for result in results}
    closing = []
    for call in pending.calls:
        if call.id in given:
            closing.append(given[call.id])
            continue
        reason = {"frontend": NOT_RUN_BY_CLIENT, "approval": NOT_APPROVED, "server": NOT_RUN_MOVED_ON}[call.kind]
        if call.id in denied:
            reason = DENIED
        closing.append(ToolMessage(tool_call_id=call.id, name=call.name, content=reason, is_error=True))
    return closing


def plan_turn(run_input: RunInput, pending: PendingTurn | None, tools: Mapping[str, Tool[Any]]) -> TurnPlan:
    refuse_pending(run_input, pending)
    if pending is None:
        if run_input.resume or run_input.tool_results:
            loc = "resume" if run_input.resume else "tool_results"
            raise NothingPendingError(
                "nothing to resume",
                details=[ErrorDetail(loc=["body", loc], msg="no interrupt or tool call is pending on this thread")],
            )
        return TurnPlan(pending=None, continues=False, decisions=[], closing_results=[])
    frontend = pending.of_kind("frontend")
    waiting = {call.id for call in frontend}
    for index, result in enumerate(run_input.tool_results):
        if result.tool_call_id not in waiting:
            raise NothingPendingError(
                "unknown tool call",
                details=[ErrorDetail(loc=["body", "tool_results", index], msg="answers no pending frontend tool call")],
            )
        waiting.discard(result.tool_call_id)
    if run_input.new_messages:
        # A new user turn always runs, whatever the thread waited for, so no client behaviour can leave a
        # thread that refuses every message. Only an approval the request also grants cannot be taken:
        # running the tool first and then a new turn is two turns in one request.
        if any(decision.status == "resolved" for decision in run_input.resume):
            raise _invalid(
                "a run either continues the waiting turn or starts a new one",
                ["body", "messages"],
                "send the approvals without a new user message, or the new message alone (the pending "
                "approvals are then declined)",
            )
        denied = {decision.call.id for decision in _approvals(run_input, pending, tools, complete=False)}
        closing = _closing(pending, run_input.tool_results, denied)
        return TurnPlan(pending=pending, continues=False, decisions=[], closing_results=closing)
    approvals = _approvals(run_input, pending, tools) if pending.of_kind("approval") or run_input.resume else []
    answered = {result.tool_call_id for result in run_input.tool_results}
    missing = [call.id for call in frontend if call.id not in answered]
    if missing:
        raise _invalid(
            "tool results missing", ["body", "messages"], f"a result is needed for every pending call: {missing}"
        )
    decisions = [*approvals]
    for call in pending.calls:
        if call.kind == "server":
            decisions.append(CallDecision(call=call, action="run", arguments=call.arguments))
        elif call.kind == "frontend":
            decisions.append(CallDecision(call=call, action="client_result", arguments=call.arguments))
    order = {call.id: index for index, call in enumerate(pending.calls)}
    decisions.sort(key=lambda d: order[d.call.id])
    return TurnPlan(pending=pending, continues=True, decisions=decisions, closing_results=[])
