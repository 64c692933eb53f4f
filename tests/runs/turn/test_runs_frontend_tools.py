"""Frontend tools (`RunAgentInput.tools`): offered to the execution stage next to the server's tools; a call
ends the run with outcome success and `pendingToolCallIds`; the client's tool messages continue the stage."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    INTENT_CONTRACT_LINE,
    Harness,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    parse_sse,
    stage_of,
    text_messages,
    types,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

CONFETTI = {
    "name": "show_confetti",
    "description": "Celebrate on the user's screen.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}
CALL = StubToolCall(id="call_fe_1", name="show_confetti", arguments='{"color": "gold"}')


def _input(
    sid: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *, version: str | None = "1.0"
) -> dict[str, Any]:
    declared = {"protocolVersion": version} if version is not None else {}
    tools = tools if tools is not None else [CONFETTI]
    return {"threadId": sid, "runId": "r", "messages": messages, "tools": tools, **declared}


FIRST = {"id": "u-1", "role": "user", "content": "celebrate with show_confetti!"}
RESULT = {"id": "t-1", "role": "tool", "toolCallId": "call_fe_1", "content": '{"shown": true}'}


async def _waiting(h: Harness, user: User, *, version: str | None = "1.0") -> tuple[str, list[dict[str, Any]]]:
    sid = await h.new_session(user)
    h.stub.enqueue(intent_needs("Celebrate with the confetti tool."), StubReply(tool_calls=[CALL]))
    result = await h.agui(user, _input(sid, [FIRST], version=version))
    assert result.status == 200, result.body
    if version is not None:
        assert result.events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["call_fe_1"]}
    return sid, result.events


async def test_a_frontend_tool_call_ends_the_run_and_the_clients_result_continues_it(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, events = await _waiting(h, user)

    # Callable in the execution stage only, next to the server's tools; never run by the server. Every call carries
    # the same tools (the provider caches prompt prefixes, tools included); elsewhere they cannot be called.
    intent, execution = h.stub.requests[:2]
    assert (stage_of(intent), stage_of(execution)) == ("intent", "execution")
    offered = [t["function"]["name"] for t in execution.body["tools"]]
    assert offered == ["current_time", "calculator", "update_bio", "forget_memory", "show_confetti"]
    assert (execution.body["tool_choice"], "response_format" in execution.body) == ("auto", False)
    assert intent.body["tools"] == execution.body["tools"]
    assert (intent.body["tool_choice"], intent.body["response_format"]) == ("none", {"type": "json_object"})
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert (start["toolCallId"], start["toolCallName"]) == ("call_fe_1", "show_confetti")
    assert not [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert next(e for e in reversed(events) if e["type"] == "STATE_DELTA")["delta"] == [
        {"op": "replace", "path": "/agentRuntime/status", "value": "completed"},
        {"op": "replace", "path": "/agentRuntime/stage", "value": None},
        {"op": "replace", "path": "/agentRuntime/pendingToolCallIds", "value": ["call_fe_1"]},
    ]

    h.stub.enqueue(execution_done("Confetti shown.", {"shown": True}), organized("Congratulations!"))
    resumed = await h.agui(user, _input(sid, [FIRST, RESULT]))

    assert types(resumed.events)[-1] == "RUN_FINISHED", resumed.body
    assert "outcome" not in resumed.events[-1]
    assert list(text_messages(resumed.events).values()) == ["Congratulations!"]
    continued = h.stub.requests[2]
    assert stage_of(continued) == "execution"
    assert continued.messages[-1] == {"role": "tool", "content": '{"shown": true}', "tool_call_id": "call_fe_1"}
    visible = await h.visible(user, sid)
    assert [(m["role"], m["message_id"] if m["role"] == "tool" else m["metadata"]["kind"]) for m in visible] == [
        ("user", "user_input"),
        ("assistant", "tool_call"),
        ("tool", "t-1"),
        ("assistant", "assistant_output"),
    ]


async def test_a_new_user_message_instead_of_the_result_closes_the_call(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, _ = await _waiting(h, user)
    h.stub.enqueue(
        StubReply(
            content=json.dumps(
                {"route": "DIRECT_EXECUTION", "assistant_text": "OK.", "intent_summary": "chat", "safety_flags": []}
            )
        )
    )

    moved_on = await h.agui(user, _input(sid, [{"id": "u-2", "role": "user", "content": "never mind"}]))

    assert types(moved_on.events)[-1] == "RUN_FINISHED", moved_on.body
    visible = await h.visible(user, sid)
    assert [(m["role"], m["content"]) for m in visible][1:4] == [
        ("assistant", ""),
        ("tool", '{"error": "the client did not run this tool"}'),
        ("user", "never mind"),
    ]
    # The model sees the call closed, so the provider gets a complete tool exchange.
    sent = h.stub.requests[-1].messages
    assert [m["role"] for m in sent][1:4] == ["user", "assistant", "tool"]


async def test_a_client_before_1_0_gets_a_run_finished_its_schemas_accept(
    h: Harness, make_user: Callable[[], User]
) -> None:
    # CopilotKit 1.74 bundles @ag-ui/core 0.0.59 and declares no protocolVersion; its success outcome is strict
    # `{"type": "success"}`, so `pendingToolCallIds` in it failed the whole event and the tool never ran.
    user = make_user()
    _, events = await _waiting(h, user, version=None)

    finished = events[-1]
    assert "outcome" not in finished, finished
    assert finished["result"] == {"pendingToolCallIds": ["call_fe_1"]}
    assert events[0]["protocolVersion"] == "1.0"
    # The call is open in the stream (no result): what a consumer derives the pending calls from.
    assert [e["type"] for e in events if e.get("toolCallId") == "call_fe_1"] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
    ]


async def test_the_result_sent_with_the_next_user_message_closes_the_call_and_the_new_turn_runs(
    h: Harness, make_user: Callable[[], User]
) -> None:
    # What CopilotKit sends after its tool ran (or failed): the tool message and the next user message at once.
    # It used to be a 422, and since the client resends both every time, every later message too: a wedged thread.
    user = make_user()
    sid, _ = await _waiting(h, user, version=None)
    failed = {"id": "t-1", "role": "tool", "toolCallId": "call_fe_1", "content": '{"error": "no confetti here"}'}
    h.stub.enqueue(intent_direct("Sorry about the confetti."))

    both = await h.agui(user, _input(sid, [FIRST, failed, {"id": "u-2", "role": "user", "content": "oh well"}]))

    assert types(both.events)[-1] == "RUN_FINISHED", both.body
    visible = await h.visible(user, sid)
    assert [(m["role"], m["message_id"], m["content"]) for m in visible][1:4] == [
        ("assistant", visible[1]["message_id"], ""),
        ("tool", "t-1", '{"error": "no confetti here"}'),
        ("user", "u-2", "oh well"),
    ]
    sent = h.stub.requests[-1].messages
    assert [m["role"] for m in sent][-3:] == ["assistant", "tool", "user"]
    assert (
        sent[-2]["content"] == '{"error": "no confetti here"}'
        and sent[-1]["content"] == "oh well" + INTENT_CONTRACT_LINE
    )
    # And the thread goes on: the client's copy (resent, already stored) and one more message.
    later = await h.agui(
        user,
        _input(
            sid,
            [
                FIRST,
                failed,
                {"id": "u-2", "role": "user", "content": "oh well"},
                {"id": "u-3", "role": "user", "content": "hi"},
            ],
        ),
    )
    assert types(later.events)[-1] == "RUN_FINISHED", later.body
    assert not [e for e in later.events if e["type"] == "CUSTOM" and e["name"] == "input_ignored"]


async def test_rest_answers_frontend_calls_with_tool_results_alone_or_with_a_new_message(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, _ = await _waiting(h, user)
    h.stub.enqueue(intent_direct("Nice."))

    both = await h.client.post(
        f"/v1/sessions/{sid}/runs",
        headers=user.headers,
        json={"message": "and now?", "tool_results": [{"tool_call_id": "call_fe_1", "content": '{"shown": true}'}]},
    )

    assert both.status_code == 200, both.text
    visible = await h.visible(user, sid)
    assert [(m["role"], m["content"]) for m in visible][2:4] == [("tool", '{"shown": true}'), ("user", "and now?")]

    # Nothing pending any more: a result answers nothing (refused, nothing stored), a message runs.
    stale = await h.client.post(
        f"/v1/sessions/{sid}/runs",
        headers=user.headers,
        json={"tool_results": [{"tool_call_id": "call_fe_1", "content": "{}"}]},
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "interrupt_unknown", stale.text
    assert types((await h.run(user, sid, "hello")).events)[-1] == "RUN_FINISHED"

    sid, _ = await _waiting(h, user)
    h.stub.enqueue(execution_done("Confetti shown.", {"shown": True}), organized("Congratulations!"))
    alone = await h.client.post(
        f"/v1/sessions/{sid}/runs",
        headers=user.headers,
        json={"tool_results": [{"tool_call_id": "call_fe_1", "content": '{"shown": true}'}]},
    )
    assert alone.status_code == 200, alone.text
    assert stage_of(h.stub.requests[-2]) == "execution"
    assert list(text_messages(parse_sse(alone.text)).values()) == ["Congratulations!"]


@pytest.mark.parametrize(
    ("tools", "loc", "msg"),
    [
        ([CONFETTI, CONFETTI], ["body", "tools", 1, "name"], "duplicate tool name 'show_confetti'"),
        ([{**CONFETTI, "name": "calculator"}], ["body", "tools", 0, "name"], "'calculator' is a server tool's name"),
        (
            [{**CONFETTI, "name": "bad name!"}],
            ["body", "tools", 0, "name"],
            "must be 1 to 64 letters, digits, '_' or '-'",
        ),
        ([{**CONFETTI, "name": f"t{i}"} for i in range(11)], ["body", "tools"], "at most 10 tools per run"),
        (
            [{**CONFETTI, "parameters": {"type": "object", "description": "x" * 9000}}],
            ["body", "tools", 0, "parameters"],
            "must be at most 8192 bytes of JSON",
        ),
        (
            [{**CONFETTI, "parameters": {"type": "string"}}],
            ["body", "tools", 0, "parameters"],
            'must be a JSON schema of an object ({"type": "object", ...})',
        ),
    ],
)
async def test_frontend_tools_are_validated_before_the_run(
    h: Harness, make_user: Callable[[], User], tools: list[dict[str, Any]], loc: list[Any], msg: str
) -> None:
    user = make_user()
    sid = await h.new_session(user)

    response = await h.agui(user, _input(sid, [{"id": "u-1", "role": "user", "content": "hi"}], tools))

    assert response.status == 422, response.body
    assert json.loads(response.body)["error"]["details"] == [{"loc": loc, "msg": msg, "type": None}]
    assert await h.rows(user, sid) == [] and h.stub.requests == []
