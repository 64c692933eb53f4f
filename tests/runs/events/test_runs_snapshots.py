"""Every run starts with MESSAGES_SNAPSHOT (the stored thread, as `GET /v1/sessions/{id}/messages` lists it)
and STATE_SNAPSHOT; STATE_DELTA patches then apply cleanly to it; the client's AG-UI state is kept as data."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.conftest import User
from tests.runs.conftest import Harness, execution_done, intent_needs, organized, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall


def agui_view(item: dict[str, Any]) -> dict[str, Any]:
    """A message of `GET /v1/sessions/{id}/messages` as an AG-UI message."""
    metadata = item["metadata"]
    message: dict[str, Any] = {"id": item["message_id"], "role": item["role"]}
    if item["role"] == "tool":
        message.update(content=item["content"], toolCallId=metadata["tool_call_id"])
        if metadata["is_error"]:
            message["error"] = item["content"]
    elif metadata.get("tool_calls"):
        if item["content"]:
            message["content"] = item["content"]
        message["toolCalls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in metadata["tool_calls"]
        ]
    else:
        message["content"] = item["content"]
    return message


def apply_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `replace` as the client applies it with validation on: the path must exist."""
    result = json.loads(json.dumps(document))
    for operation in operations:
        assert operation["op"] == "replace", operation
        *parents, last = operation["path"].lstrip("/").split("/")
        target = result
        for part in parents:
            target = target[part]
        assert last in target, operation
        target[last] = operation["value"]
    return result


async def test_messages_snapshot_is_the_stored_thread(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    call = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "6*7"}')
    h.stub.enqueue(
        intent_needs("Compute 6*7."), StubReply(tool_calls=[call]), execution_done("42", {}), organized("It is 42.")
    )
    await h.run(user, sid, "what is 6*7?")

    result = await h.run(user, sid, "thanks")

    (snapshot,) = result.of_type("MESSAGES_SNAPSHOT")
    listed = await h.visible(user, sid)
    # Listed after the run: its reply is stored too, the snapshot was taken when the run started.
    assert snapshot["messages"] == [agui_view(item) for item in listed[:-1]]
    assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant", "tool", "assistant", "user"]


async def test_state_deltas_apply_to_the_snapshot_and_client_state_is_kept_as_data(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    call = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "1+1"}')
    h.stub.enqueue(intent_needs("1+1"), StubReply(tool_calls=[call]), execution_done("2", {}), organized("2."))
    client_state = {"draft": "half-written reply", "agentRuntime": {"status": "forged"}}
    body = {
        "threadId": sid,
        "runId": "r",
        "state": client_state,
        "messages": [{"id": "u-1", "role": "user", "content": "1+1?"}],
    }

    result = await h.agui(user, body)

    (snapshot,) = result.of_type("STATE_SNAPSHOT")
    # The client's own data stays; the run's key is the server's (the client's copy is dropped).
    assert snapshot["snapshot"]["draft"] == "half-written reply"
    state = snapshot["snapshot"]
    seen = [state["agentRuntime"]]
    for delta in result.of_type("STATE_DELTA"):
        state = apply_patch(state, delta["delta"])
        seen.append(state["agentRuntime"])
    assert [(s["status"], s["stage"], s["route"]) for s in seen] == [
        ("running", None, None),
        ("running", "intent", None),
        ("running", "execution", "NEEDS_EXECUTION"),
        ("running", "organization", "NEEDS_EXECUTION"),
        ("completed", None, "NEEDS_EXECUTION"),
    ]
    assert state == {
        "draft": "half-written reply",
        "agentRuntime": {
            "runId": result.run_id,
            "status": "completed",
            "stage": None,
            "route": "NEEDS_EXECUTION",
            "pendingToolCallIds": [],
            "interrupts": [],
        },
    }
    # Stored on the session as data: a later run without state (here over REST) starts from it, and it
    # never reaches the model.
    later = await h.run(user, sid, "and 2+2?")
    assert later.of_type("STATE_SNAPSHOT")[0]["snapshot"]["draft"] == "half-written reply"
    assert all("half-written" not in json.dumps(r.messages) for r in h.stub.requests)


async def test_client_state_is_size_limited(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    for state, msg in [
        ({"blob": "x" * 20_000}, "must be at most 16384 bytes of JSON"),
        (["not", "an", "object"], "must be a JSON object"),
    ]:
        body = {
            "threadId": sid,
            "runId": "r",
            "state": state,
            "messages": [{"id": "u", "role": "user", "content": "hi"}],
        }
        response = await h.agui(user, body)
        assert response.status == 422, response.body
        assert json.loads(response.body)["error"]["details"] == [{"loc": ["body", "state"], "msg": msg, "type": None}]
    assert await h.rows(user, sid) == []
    assert types((await h.run(user, sid, "hello")).events)[2] == "STATE_SNAPSHOT"
