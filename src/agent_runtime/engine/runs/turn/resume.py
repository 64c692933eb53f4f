"""A suspended turn goes on: the waiting tool calls get their results, then the execution stage continues.

Approved calls run here, once, with the arguments the user approved (the tool still validates them); a
denied call gets `{"error": "denied by the user"}`; a server tool that came in the same model reply runs
as it would have; a frontend call's result is the client's (stored when the run started). The results are
stored as visible tool rows right after the call, and streamed as TOOL_CALL_RESULT.
"""

from __future__ import annotations

import json
from uuid import uuid4

from agent_runtime.engine.flow.tools import RunToolSet
from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.gateway.recorder import RunRecorder, ToolResultRecord
from agent_runtime.engine.runs.request.plan import DENIED, CallDecision


def _edited(arguments: str, content: str) -> str:
    # The stored call still shows the model's arguments: tell the model what actually ran.
    try:
        result: object = json.loads(content)
    except ValueError:
        result = content
    return json.dumps({"arguments_edited_by_user": json.loads(arguments), "result": result}, ensure_ascii=False)


async def _result(decision: CallDecision, toolset: RunToolSet) -> ToolResultRecord:
    call = decision.call
    if decision.action == "deny":
        content, is_error = DENIED, True
    elif decision.action == "answer" and decision.content is not None:
        content, is_error = decision.content, True
    else:
        outcome = await toolset.run(call.name, decision.arguments, call_id=call.id)
        content, is_error = outcome.content, not outcome.ok
        if decision.edited:
            content = _edited(decision.arguments, content)
    return ToolResultRecord(
        message_id=str(uuid4()), tool_call_id=call.id, name=call.name, content=content, is_error=is_error
    )


async def run_decisions(
    decisions: list[CallDecision], toolset: RunToolSet, recorder: RunRecorder, events: RunEvents
) -> None:
    for decision in decisions:
        if decision.action == "client_result":
            continue
        record = await _result(decision, toolset)
        events.tool_result(message_id=record.message_id, tool_call_id=record.tool_call_id, content=record.content)
        recorder.tool_result(record)
    await recorder.flush_tool_results()
