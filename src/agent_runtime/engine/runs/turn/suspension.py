"""A run that stops at a model reply asking for approval or frontend tools: the pending turn it leaves.

Every call of that reply is recorded with its kind (the server's own tools of the same reply run when the
turn goes on, with the approved ones); the interrupts name each approval call with its arguments and the
JSON schema an edited version must match.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any
from uuid import uuid4

from pydantic import BaseModel

from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.contracts import IntentResult
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runs.events.types import PendingInterrupt
from agent_runtime.engine.runs.request.pending import (
    CallKind,
    PendingCall,
    PendingTurn,
    approval_interrupts,
    frontend_call_ids,
)


class Suspension(BaseModel):
    turn: PendingTurn
    interrupts: list[PendingInterrupt]
    pending_tool_call_ids: list[str]


def _kind(name: str, approval: Collection[str], frontend: Collection[str]) -> CallKind:
    if name in approval:
        return "approval"
    return "frontend" if name in frontend else "server"


def suspension(
    calls: list[ToolCallSpec],
    *,
    run_id: str,
    user_input: str,
    intent: IntentResult,
    intent_answer: str | None,
    intent_reasoning: str | None,
    approval: Collection[str],
    frontend: Collection[str],
    tools: Mapping[str, Tool[Any]],
) -> Suspension:
    pending = [
        PendingCall(id=c.id, name=c.name, arguments=c.arguments, kind=_kind(c.name, approval, frontend)) for c in calls
    ]
    turn = PendingTurn(
        id=uuid4().hex,
        run_id=run_id,
        user_input=user_input,
        intent=intent,
        intent_answer=intent_answer,
        intent_reasoning=intent_reasoning,
        calls=pending,
    )
    return Suspension(
        turn=turn, interrupts=approval_interrupts(turn, tools), pending_tool_call_ids=frontend_call_ids(turn)
    )
