"""Tool approval through AG-UI interrupts: `update_bio` (`requires_approval: true` in the YAML) never runs on
the model's word alone. The run stops with outcome `interrupt`; the next run's `resume` approves (optionally
with edited arguments), or denies; a new user message instead declines it and runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    MakeHarness,
    RunResult,
    execution_done,
    intent_needs,
    organized,
    stage_of,
    text_messages,
    types,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

from agent_runtime.engine.runs.request.approval import EXPECTED_SHAPE

CALL_ID = "call_bio_1"
ARGS = '{"bio": "Kayaker from Lofoten"}'
INTERRUPT_ID = f"approve-{CALL_ID}"


def _bio_call(arguments: str = ARGS) -> StubReply:
    return StubReply(tool_calls=[StubToolCall(id=CALL_ID, name="update_bio", arguments=arguments)])


def agui_input(thread_id: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": "r", "messages": messages, "state": {}, "tools": [], "context": [], **extra}


async def _bio(h: Harness, user: User) -> str | None:
    profile = (await h.client.get("/v1/profile", headers=user.headers)).json()
    bio: str | None = profile["bio"]
    return bio


async def _interrupted(h: Harness, user: User) -> tuple[str, RunResult]:
    """One AG-UI run that stops at the model's update_bio call."""
    sid = await h.new_session(user)
    h.stub.enqueue(intent_needs("Set the user's bio."), _bio_call())
    result = await h.agui(user, agui_input(sid, [{"id": "u-1", "role": "user", "content": "set my bio to kayaking"}]))
    assert result.status == 200, result.body
    return sid, result


def _resume(sid: str, status: str, payload: Any = None) -> dict[str, Any]:
    entry = {"interruptId": INTERRUPT_ID, "status": status, **({"payload": payload} if payload is not None else {})}
    return agui_input(sid, [{"id": "u-1", "role": "user", "content": "set my bio to kayaking"}], resume=[entry])


async def test_the_run_stops_at_the_call_and_the_tool_runs_once_only_after_approval(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, first = await _interrupted(h, user)

    assert types(first.events) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
        "STEP_STARTED",
        "STATE_DELTA",
        "STEP_FINISHED",
        "STEP_STARTED",
        "STATE_DELTA",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "CUSTOM",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    finished = first.events[-1]
    schema = finished["outcome"]["interrupts"][0].pop("responseSchema")
    assert schema["properties"]["arguments"]["properties"]["bio"]["type"] == "string"
    assert finished["outcome"] == {
        "type": "interrupt",
        "interrupts": [
            {
                "id": INTERRUPT_ID,
                "reason": "tool_approval",
                "message": "Allow the assistant to run update_bio?",
                "toolCallId": CALL_ID,
                "metadata": {"toolName": "update_bio", "arguments": {"bio": "Kayaker from Lofoten"}},
            }
        ],
    }
    assert first.events[-2]["delta"] == [
        {"op": "replace", "path": "/agentRuntime/status", "value": "interrupted"},
        {"op": "replace", "path": "/agentRuntime/stage", "value": None},
        {"op": "replace", "path": "/agentRuntime/interrupts", "value": [INTERRUPT_ID]},
    ]
    assert await _bio(h, user) is None
    assert (await h.session(user, sid))["status"] == "completed"
    visible = await h.visible(user, sid)
    assert [(m["role"], m["metadata"]["kind"]) for m in visible] == [("user", "user_input"), ("assistant", "tool_call")]

    h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker from Lofoten"}), organized("Your bio is updated."))
    resumed = await h.agui(user, _resume(sid, "resolved"))

    assert types(resumed.events)[:8] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
        "STEP_STARTED",
        "STATE_DELTA",
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
        "STEP_STARTED",
    ]
    assert types(resumed.events)[-1] == "RUN_FINISHED" and "outcome" not in resumed.events[-1]
    result = resumed.of_type("TOOL_CALL_RESULT")[0]
    assert (result["toolCallId"], json.loads(result["content"])) == (
        CALL_ID,
        {"bio": "Kayaker from Lofoten", "updated": True},
    )
    assert list(text_messages(resumed.events).values()) == ["Your bio is updated."]
    assert await _bio(h, user) == "Kayaker from Lofoten"
    # The execution stage went on from its own request, with the call and its result after it.
    execution = h.stub.requests[-2]
    assert stage_of(execution) == "execution"
    assert execution.messages[-2:] == [
        {
            "role": "assistant",
            "tool_calls": [{"id": CALL_ID, "type": "function", "function": {"name": "update_bio", "arguments": ARGS}}],
        },
        {"role": "tool", "content": result["content"], "name": "update_bio", "tool_call_id": CALL_ID},
    ]
    visible = await h.visible(user, sid)
    assert [(m["role"], m["metadata"]["kind"]) for m in visible] == [
        ("user", "user_input"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "assistant_output"),
    ]

    # Resuming again: nothing is pending any more, and the tool does not run twice.
    again = await h.agui(user, _resume(sid, "resolved"))
    refused = json.loads(again.body)["error"]
    assert (again.status, refused["code"], refused["message"]) == (409, "interrupt_unknown", "nothing to resume")
    assert len(h.stub.requests) == 4


async def test_approval_with_edited_arguments_runs_the_tool_with_them(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, _ = await _interrupted(h, user)
    h.stub.enqueue(execution_done("Bio updated.", {}), organized("Done."))

    resumed = await h.agui(user, _resume(sid, "resolved", {"arguments": {"bio": "Paddler"}}))

    assert types(resumed.events)[-1] == "RUN_FINISHED", resumed.body
    assert await _bio(h, user) == "Paddler"
    (result,) = resumed.of_type("TOOL_CALL_RESULT")
    assert json.loads(result["content"]) == {
        "arguments_edited_by_user": {"bio": "Paddler"},
        "result": {"bio": "Paddler", "updated": True},
    }


@pytest.mark.parametrize(
    ("payload", "msg"),
    [
        pytest.param({"arguments": {"bio": ""}}, "bio: String should have at least 1 character", id="schema"),
        pytest.param(
            {"arguments": {"bio": "x", "user_id": "someone"}}, "user_id: Extra inputs are not permitted", id="extra"
        ),
        pytest.param(
            {"arguments": "x"},
            f"arguments: Input should be a valid dictionary; must be {EXPECTED_SHAPE}",
            id="shape",
        ),
        # The interrupt's responseSchema has additionalProperties: false; a payload it forbids is refused.
        pytest.param(
            {"approve": True}, f"approve: Extra inputs are not permitted; must be {EXPECTED_SHAPE}", id="extra-key"
        ),
        pytest.param(
            {"approved": True, "note": "ok"},
            f"note: Extra inputs are not permitted; must be {EXPECTED_SHAPE}",
            id="approved-and-extra",
        ),
        pytest.param(
            {"approved": "yes"}, f"approved: Input should be a valid boolean; must be {EXPECTED_SHAPE}", id="not-bool"
        ),
        pytest.param(
            "yes",
            f"payload: Input should be a valid dictionary or instance of ApprovalPayload; must be {EXPECTED_SHAPE}",
            id="not-object",
        ),
    ],
)
async def test_edited_arguments_that_fail_the_tool_schema_are_a_422_and_change_nothing(
    h: Harness, make_user: Callable[[], User], payload: Any, msg: str
) -> None:
    user = make_user()
    sid, _ = await _interrupted(h, user)
    before = await h.rows(user, sid)

    refused = await h.agui(user, _resume(sid, "resolved", payload))

    assert refused.status == 422, refused.body
    assert json.loads(refused.body)["error"]["details"][0]["msg"] == msg
    assert await h.rows(user, sid) == before and await _bio(h, user) is None
    assert (await h.session(user, sid))["status"] == "completed"
    # Still pending: a valid answer goes through.
    h.stub.enqueue(execution_done("Bio updated.", {}), organized("Done."))
    assert types((await h.agui(user, _resume(sid, "resolved"))).events)[-1] == "RUN_FINISHED"


async def test_a_denied_call_gets_an_error_result_and_the_run_goes_on(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, _ = await _interrupted(h, user)
    h.stub.enqueue(execution_done("The user declined.", {}), organized("OK, I left your bio as it is."))

    resumed = await h.agui(user, _resume(sid, "cancelled"))

    assert types(resumed.events)[-1] == "RUN_FINISHED", resumed.body
    (result,) = resumed.of_type("TOOL_CALL_RESULT")
    assert result["content"] == '{"error": "denied by the user"}'
    assert await _bio(h, user) is None
    rows = await h.visible(user, sid)
    assert rows[2]["metadata"] == {
        "kind": "tool_result",
        "tool_call_id": CALL_ID,
        "tool_name": "update_bio",
        "is_error": True,
        "run_id": resumed.run_id,
        "cancelled": None,
    }


async def test_rest_runs_resume_through_the_resume_field(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_needs("Set the user's bio."), _bio_call())
    first = await h.run(user, sid, "set my bio to kayaking")
    assert first.events[-1]["outcome"]["type"] == "interrupt"
    refused = await h.client.post(f"/v1/sessions/{sid}/runs", headers=user.headers, json={"resume": []})
    assert refused.status_code == 422, refused.text
    h.stub.enqueue(execution_done("Bio updated.", {}), organized("Done."))

    response = await h.client.post(
        f"/v1/sessions/{sid}/runs",
        headers=user.headers,
        json={"resume": [{"interrupt_id": INTERRUPT_ID, "status": "resolved"}]},
    )

    assert response.status_code == 200, response.text
    assert await _bio(h, user) == "Kayaker from Lofoten"
    both = await h.client.post(
        f"/v1/sessions/{sid}/runs",
        headers=user.headers,
        json={"message": "hi", "resume": [{"interrupt_id": INTERRUPT_ID, "status": "resolved"}]},
    )
    assert both.status_code == 422


async def test_another_process_serves_the_resume(make_harness: MakeHarness, make_user: Callable[[], User]) -> None:
    user = make_user()
    async with make_harness() as first:
        sid, _ = await _interrupted(first, user)
    # A new app (own pool, nothing in memory from the first) on the same database.
    async with make_harness() as second:
        second.stub.enqueue(execution_done("Bio updated.", {}), organized("Done."))
        resumed = await second.agui(user, _resume(sid, "resolved"))
        assert types(resumed.events)[-1] == "RUN_FINISHED", resumed.body
        assert await _bio(second, user) == "Kayaker from Lofoten"


async def test_copilotkits_approved_payload_is_the_approval_its_responseschema_allows(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid, first = await _interrupted(h, user)
    schema = first.events[-1]["outcome"]["interrupts"][0]["responseSchema"]
    assert (schema["properties"]["approved"], schema["additionalProperties"]) == ({"type": "boolean"}, False)
    h.stub.enqueue(execution_done("Bio updated.", {}), organized("Done."))

    approved = await h.agui(user, _resume(sid, "resolved", {"approved": True}))

    assert types(approved.events)[-1] == "RUN_FINISHED", approved.body
    assert await _bio(h, user) == "Kayaker from Lofoten"

    sid, _ = await _interrupted(h, user)
    h.stub.enqueue(execution_done("The user declined.", {}), organized("OK."))
    declined = await h.agui(user, _resume(sid, "resolved", {"approved": False}))
    (result,) = declined.of_type("TOOL_CALL_RESULT")
    assert result["content"] == '{"error": "denied by the user"}'
    assert await _bio(h, user) == "Kayaker from Lofoten"  # unchanged by the second, declined call


async def test_a_new_user_message_while_an_approval_waits_declines_it_and_runs(
    h: Harness, make_user: Callable[[], User]
) -> None:
    # A client that cannot answer interrupts (or whose answer was refused) must still be able to go on.
    user = make_user()
    sid, _ = await _interrupted(h, user)
    bad = await h.agui(user, _resume(sid, "resolved", {"approve": True}))
    assert bad.status == 422, bad.body
    h.stub.enqueue(
        StubReply(
            content=json.dumps(
                {"route": "DIRECT_EXECUTION", "assistant_text": "OK.", "intent_summary": "chat", "safety_flags": []}
            )
        )
    )

    moved_on = await h.agui(user, agui_input(sid, [{"id": "u-2", "role": "user", "content": "never mind"}]))

    assert types(moved_on.events)[-1] == "RUN_FINISHED", moved_on.body
    assert await _bio(h, user) is None
    visible = await h.visible(user, sid)
    assert [(m["role"], m["content"]) for m in visible][2:] == [
        ("tool", '{"error": "not approved: the user sent a new message instead"}'),
        ("user", "never mind"),
        ("assistant", "OK."),
    ]
    assert [m["role"] for m in h.stub.requests[-1].messages][-3:] == ["assistant", "tool", "user"]
    # The same over REST, and a grant together with a new message is the one refusal.
    sid, _ = await _interrupted(h, user)
    grant_and_message = await h.agui(
        user,
        agui_input(
            sid,
            [{"id": "u-9", "role": "user", "content": "and also"}],
            resume=[{"interruptId": INTERRUPT_ID, "status": "resolved"}],
        ),
    )
    assert grant_and_message.status == 422, grant_and_message.body
    assert types((await h.run(user, sid, "hello again")).events)[-1] == "RUN_FINISHED"
    assert await _bio(h, user) is None


async def test_a_resume_that_answers_only_some_interrupts_is_a_409_naming_the_rest_and_runs_nothing(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    calls = [
        StubToolCall(id=CALL_ID, name="update_bio", arguments=ARGS),
        StubToolCall(id="call_bio_2", name="update_bio", arguments='{"bio": "Runner"}'),
    ]
    h.stub.enqueue(intent_needs("Set the user's bio."), StubReply(tool_calls=calls))
    first = await h.agui(user, agui_input(sid, [{"id": "u-1", "role": "user", "content": "set my bio"}]))
    assert [i["id"] for i in first.events[-1]["outcome"]["interrupts"]] == [INTERRUPT_ID, "approve-call_bio_2"]
    before = await h.visible(user, sid)

    partial = await h.agui(user, _resume(sid, "resolved"))

    assert partial.status == 409, partial.body
    error = json.loads(partial.body)["error"]
    assert (error["code"], error["details"]) == (
        "interrupt_pending",
        [{"loc": ["body", "resume"], "msg": "missing: approve-call_bio_2", "type": None}],
    )
    assert await h.visible(user, sid) == before and await _bio(h, user) is None


async def test_the_resumed_turn_sends_the_intent_answer_as_the_model_wrote_it(
    h: Harness, make_user: Callable[[], User]
) -> None:
    """The resumed execution call repeats the stopped run's execution call up to its request byte for byte, so the
    provider's cache still holds it: the intent answer as the model wrote it (`json.dumps` spacing here), not
    re-serialised compactly."""
    user = make_user()
    sid, _ = await _interrupted(h, user)
    stopped = h.stub.requests[-1]
    assert stage_of(stopped) == "execution"
    written = stopped.messages[-2]
    assert written["role"] == "assistant" and '"route": "NEEDS_EXECUTION"' in written["content"]

    h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker from Lofoten"}), organized("Your bio is updated."))
    resumed = await h.agui(user, _resume(sid, "resolved"))
    assert types(resumed.events)[-1] == "RUN_FINISHED"

    execution = h.stub.requests[-2]
    assert stage_of(execution) == "execution"
    assert execution.messages[: len(stopped.messages)] == stopped.messages
