"""Issue 10's four wire bugs, each against the faithful DeepSeek stub.

(a) one assistant message per answer whatever the retries; (b) a retry while nothing of the answer
reached the client; (c) never two user messages in a row; (d) never `response_format` with `tools`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise

from tests.conftest import User
from tests.runs.conftest import (
    Harness,
    client_messages,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    run_error_id,
    text_messages,
    types,
)
from tests.stubs.deepseek_stub import StubFault, StubReply, StubToolCall


async def test_b_a_stream_cut_before_any_answer_text_reached_the_client_is_retried(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    # Two chunks of the intent's JSON ('{"ro', 'ute"'), no assistant_text yet, then the line drops.
    partial = intent_direct("Hello there, how are you?").content
    h.stub.enqueue(StubFault(kind="disconnect", after_chunks=3, content=partial), intent_direct("Hi again!"))

    result = await h.run(user, sid, "hello")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    assert len(h.stub.requests) == 2
    assert list(text_messages(result.events).values()) == ["Hi again!"]
    assert [(m["role"], m["content"]) for m in await h.visible(user, sid)] == [
        ("user", "hello"),
        ("assistant", "Hi again!"),
    ]


async def test_a_an_answer_cut_after_text_reached_the_client_leaves_one_message_per_answer(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await h.new_session(user)
    answer = intent_direct("Hello there, how are you today?").content
    prefix = answer.index("Hello")
    # Cut three chunks into the answer text: "Hello there," reached the client.
    h.stub.enqueue(StubFault(kind="disconnect", after_chunks=1 + prefix // 4 + 3, content=answer))

    failed = await h.run(user, sid, "hello")

    assert len(h.stub.requests) == 1  # text had reached the client: no retry
    (partial,) = text_messages(failed.events).values()
    assert partial and "Hello there, how are you today?".startswith(partial)
    error_id = run_error_id(failed.events[-1], "llm_stream_interrupted", "The language model stream was interrupted.")
    assert types(failed.events)[-4:] == ["MESSAGES_SNAPSHOT", "STATE_DELTA", "STEP_FINISHED", "RUN_ERROR"]
    assert (await h.session(user, sid))["error_id"] == error_id
    # The stream retracts the partial answer before RUN_ERROR: the client is left with the stored messages.
    sent = [{"id": "u-1", "role": "user", "content": "hello"}]
    stored = await h.visible(user, sid)
    assert [m["role"] for m in stored] == ["user"]
    after = client_messages(failed.events, [{**sent[0], "id": stored[0]["message_id"]}])
    assert [(m["role"], m["content"]) for m in after] == [("user", "hello")]

    # Asked again: one stored assistant message per answer, and the model never saw the partial one.
    h.stub.enqueue(intent_direct("Fine, thanks!"))
    again = await h.run(user, sid, "hello?")
    assert list(text_messages(again.events).values()) == ["Fine, thanks!"]
    assert [(m["role"], m["content"]) for m in await h.visible(user, sid)] == [
        ("user", "hello"),
        ("user", "hello?"),
        ("assistant", "Fine, thanks!"),
    ]
    assert all(partial not in json.dumps(m) for m in h.stub.requests[-1].messages if m["role"] == "assistant")


async def test_c_after_a_failed_run_no_provider_sees_two_user_messages_in_a_row(
    h: Harness, make_user: Callable[[], User]
) -> None:
    h.stub.strict_turns = True
    user = make_user()
    sid = await h.new_session(user)
    h.stub.enqueue(StubFault(kind="status", status=400, message="bad request"))
    failed = await h.run(user, sid, "first question")
    assert types(failed.events)[-1] == "RUN_ERROR"

    h.stub.enqueue(intent_direct("Answering both."))
    result = await h.run(user, sid, "second question")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    roles = [m["role"] for m in h.stub.requests[-1].messages]
    assert all(not (a == b == "user") for a, b in pairwise(roles)), roles
    # The unanswered turn is not lost: the model is asked about both messages.
    request = h.stub.requests[-1].messages[-1]["content"]
    assert "first question" in request and "second question" in request


async def test_d_no_call_sends_response_format_together_with_tools(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    call = StubReply(tool_calls=[StubToolCall(id="call_1", name="calculator", arguments='{"expression": "2+2"}')])
    h.stub.enqueue(
        intent_needs("Compute 2+2."),
        call,
        execution_done("2+2=4", {"result": "4"}),
        organized("It is 4."),
    )

    result = await h.run(user, sid, "what is 2+2?")

    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    bodies = [r.body for r in h.stub.requests]
    # Every call carries the run's tools (the prompt prefix stays the same); JSON mode only where none can be called.
    assert [(b["tool_choice"], "response_format" in b) for b in bodies] == [
        ("none", True),  # intent: JSON mode, tools it may not call
        ("auto", False),  # execution: tools it may call, so no JSON mode (the answer is still validated)
        ("auto", False),
        ("none", True),  # organization
    ]
