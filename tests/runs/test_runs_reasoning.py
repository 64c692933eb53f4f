"""Reasoning (deepseek-reasoner's `reasoning_content`): streamed as REASONING_* events, kept as an audit row,
and never sent back to the model in later turns (DeepSeek's rule)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    client_messages,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    text_messages,
    types,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

THOUGHT = "The user greets me; a greeting back is enough."


async def test_streamed_reasoning_becomes_reasoning_events_and_an_audit_row(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hello!", reasoning_content=THOUGHT, chunk_chars=8))

    result = await h.run(user, sid, "hi")

    kinds = types(result.events)
    contents = result.of_type("REASONING_MESSAGE_CONTENT")
    assert kinds[5:9] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
    ]
    first_text = kinds.index("TEXT_MESSAGE_START")
    assert kinds[first_text - 2 : first_text] == ["REASONING_MESSAGE_END", "REASONING_END"]
    assert "".join(e["delta"] for e in contents) == THOUGHT
    reasoning_id = result.of_type("REASONING_START")[0]["messageId"]
    assert {e["messageId"] for e in result.of_type(*[k for k in kinds if k.startswith("REASONING")])} == {reasoning_id}
    assert len(contents) == 6  # streamed as the model writes it (8 characters a chunk)
    assert list(text_messages(result.events).values()) == ["Hello!"]
    # A client keeps it as a reasoning message beside the answer.
    assert [m["role"] for m in client_messages(result.events)] == ["user", "reasoning", "assistant"]

    rows = await h.rows(user, sid)
    (row,) = [r for r in rows if r.metadata.kind == "audit" and r.metadata.model_dump().get("reasoning")]
    assert (row.seq < 0, row.content, row.input_tokens, row.output_tokens) == (True, THOUGHT, 0, 0)
    # Under the streamed message's id: a client sending its reasoning message back sends history.
    assert row.message_id == reasoning_id
    assert [m["content"] for m in await h.visible(user, sid)] == ["hi", "Hello!"]

    h.stub.enqueue(intent_direct("Again!"))
    await h.run(user, sid, "once more")
    assert THOUGHT not in json.dumps(h.stub.requests[-1].body)


async def test_reasoning_of_a_call_that_does_not_stream_is_sent_whole(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    call = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "2+3"}')
    h.stub.enqueue(
        intent_needs("Compute 2+3."),
        StubReply(tool_calls=[call], reasoning_content="I should use the calculator."),
        execution_done("5", {"result": "5"}),
        organized("It is 5."),
    )

    result = await h.run(user, sid, "2+3?")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    (content,) = result.of_type("REASONING_MESSAGE_CONTENT")
    assert content["delta"] == "I should use the calculator."
    kinds = types(result.events)
    assert kinds.index("REASONING_END") < kinds.index("TOOL_CALL_START")
    # The tool loop's next call carries the call and its result, not the reasoning.
    assert "I should use" not in json.dumps(h.stub.requests[2].body)
