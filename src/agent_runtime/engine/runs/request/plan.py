"""Whether a run may start, given what the thread waits for, and what it does with the waiting tool calls.

- Nothing pending: a new turn (new user messages required; resume entries are refused).
- Interrupts pending: every one must be answered by a resume entry (else 409 `interrupt_pending`), and
  the run continues the suspended turn: approved calls run (with the user's edited arguments, validated
  against the tool's schema), denied ones get `{"error": "denied by the user"}`.
- Only frontend calls pending: the client either sends a result for each (the turn continues), or moves on
  with a new user message (each call then gets `{"error": "the client did not run this tool"}`).
Everything is checked before the run starts, so a refused request leaves nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agent_runtime.engine.errors import ConflictError, ErrorDetail, ValidationFailedError
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.memory.messages import ToolMessage
from agent_runtime.engine.runs.request.models import ResumeDecision, RunInput
from agent_runtime.engine.runs.request.pending import PendingCall, PendingTurn

DENIED = json.dumps({"error": "denied by the user"})
NOT_RUN_BY_CLIENT = json.dumps({"error": "the client did not run this tool"})


class InterruptPendingError(ConflictError):
    code = "interrupt_pending"


class NothingPendingError(ConflictError):
    """A resume entry that answers no interrupt of the thread as it is now (a state conflict, not bad input)."""

    code = "interrupt_unknown"


class CallDecision(BaseModel):
    """What happens to one call of the suspended model reply when the turn goes on."""

    model_config = ConfigDict(frozen=True)

    call: PendingCall
    action: Literal["run", "deny", "client_result"]
    arguments: str
    edited: bool = False


class TurnPlan(BaseModel):
    pending: PendingTurn | None
    continues: bool
    decisions: list[CallDecision]
    closing_results: list[ToolMessage]


def _invalid(message: str, loc: list[str | int], msg: str) -> ValidationFailedError:
    return ValidationFailedError(message, details=[ErrorDetail(loc=loc, msg=msg)])


def _edited_arguments(index: int, decision: ResumeDecision, tool: Tool[Any] | None) -> str | None:
    payload = decision.payload
    if payload is None or (isinstance(payload, dict) and "arguments" not in payload):
        return None
    loc: list[str | int] = ["body", "resume", index, "payload"]
    if not isinstance(payload, dict) or not isinstance(payload.get("arguments"), dict):
        raise _invalid("invalid resume payload", loc, 'must be {"arguments": {...}} (or absent)')
    arguments = json.dumps(payload["arguments"], ensure_ascii=False)
    if tool is not None:
        try:
            tool.args_model.model_validate_json(arguments)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise _invalid("invalid tool arguments", [*loc, "arguments"], problems) from None
    return arguments


def _approvals(run_input: RunInput, pending: PendingTurn, tools: Mapping[str, Tool[Any]]) -> list[CallDecision]:
    by_id = {call.interrupt_id: call for call in pending.of_kind("approval")}
    decided: dict[str, CallDecision] = {}
    for index, decision in enumerate(run_input.resume):
        call = by_id.get(decision.interrupt_id)
        if call is None or call.id in decided:
            raise NothingPendingError(
                "unknown interrupt",
                details=[ErrorDetail(loc=["body", "resume", index, "interruptId"], msg="answers no pending interrupt")],
            )
        if decision.status == "cancelled":
            decided[call.id] = CallDecision(call=call, action="deny", arguments=call.arguments)
            continue
        edited = _edited_arguments(index, decision, tools.get(call.name))
        arguments = edited if edited is not None else call.arguments
        decided[call.id] = CallDecision(call=call, action="run", arguments=arguments, edited=edited is not None)
    missing = [call.interrupt_id for call in by_id.values() if call.id not in decided]
    if missing:
        raise InterruptPendingError(
            "the thread waits for approvals: answer every pending interrupt with a resume entry",
            details=[ErrorDetail(loc=["body", "resume"], msg=f"missing: {', '.join(missing)}")],
        )
    return list(decided.values())


def plan_turn(run_input: RunInput, pending: PendingTurn | None, tools: Mapping[str, Tool[Any]]) -> TurnPlan:
    if pending is None:
        if run_input.resume:
            raise NothingPendingError(
                "nothing to resume",
                details=[ErrorDetail(loc=["body", "resume"], msg="no interrupt is pending on this thread")],
            )
        return TurnPlan(pending=None, continues=False, decisions=[], closing_results=[])
    approvals = _approvals(run_input, pending, tools) if pending.of_kind("approval") or run_input.resume else []
    frontend = pending.of_kind("frontend")
    answered = {result.tool_call_id for result in run_input.tool_results}
    if run_input.new_messages and (approvals or answered):
        raise _invalid(
            "a run either continues the waiting turn or starts a new one",
            ["body", "messages"],
            "send the resume entries or tool results without a new user message",
        )
    if run_input.new_messages:
        closing = [
            ToolMessage(tool_call_id=call.id, name=call.name, content=NOT_RUN_BY_CLIENT, is_error=True)
            for call in frontend
        ]
        return TurnPlan(pending=pending, continues=False, decisions=[], closing_results=closing)
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
