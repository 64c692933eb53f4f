"""A stub responder (`DeepSeekStub(responder=nearest_contract_responder)`) for a model that follows the last
instruction it reads and otherwise the schema nearest to where it answers (issue 31): it answers the stage contract
the request's last user message names, and when that message names none, the contract named last in the system
prompt (OrganizationResult for the shipped prompt, which lists the stages in order: the wrong one for an intent
call). The answers are the offline demo model's for that contract, so a run it serves completes; a wrong contract
costs the flow a repair turn, which `repair_requests` counts.
"""

from __future__ import annotations

import re
from typing import Any

from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall, content_text

from agent_runtime.engine.llm.demo.stages import (
    REPAIR_PREFIX,
    execution_answer,
    intent_answer,
    organization_answer,
)
from agent_runtime.engine.llm.models import ToolSchema, WireFunctionCall, WireMessage, WireToolCall

STAGE_CONTRACTS = ("IntentResult", "ExecutionResult", "OrganizationResult")
_CONTRACT_NAME = re.compile("|".join(STAGE_CONTRACTS))


def _last_named(text: str) -> str | None:
    names = _CONTRACT_NAME.findall(text)
    return names[-1] if names else None


def answered_contract(request: RecordedRequest) -> str:
    """The contract this model answers: the one the last user message names last, else the system prompt's last."""
    texts = {
        role: [content_text(m.get("content")) for m in request.messages if m.get("role") == role]
        for role in ("system", "user")
    }
    named = _last_named(texts["user"][-1]) if texts["user"] else None
    return named or _last_named("\n".join(texts["system"])) or STAGE_CONTRACTS[-1]


def _wire(message: dict[str, Any]) -> WireMessage:
    calls = [
        WireToolCall(id=c["id"], function=WireFunctionCall(**c["function"])) for c in message.get("tool_calls") or []
    ]
    return WireMessage(
        role=message["role"],
        content=content_text(message.get("content")),
        tool_calls=calls or None,
        tool_call_id=message.get("tool_call_id"),
    )


def nearest_contract_responder(request: RecordedRequest) -> StubReply:
    messages = [_wire(m) for m in request.messages]
    offered = request.fields.get("tools") if request.fields.get("tool_choice") != "none" else None
    tools = [ToolSchema.model_validate(t) for t in offered or []]
    contract = answered_contract(request)
    if contract == "IntentResult":
        answer = intent_answer(messages)
    elif contract == "ExecutionResult":
        answer = execution_answer(messages, tools)
    else:
        answer = organization_answer(messages)
    calls = [StubToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments) for c in answer.tool_calls]
    return StubReply(content=answer.content, tool_calls=calls)


def repair_requests(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """The requests that carried a repair turn last (a stage's answer did not match its contract)."""
    return [r for r in requests if r.messages and content_text(r.messages[-1].get("content")).startswith(REPAIR_PREFIX)]
