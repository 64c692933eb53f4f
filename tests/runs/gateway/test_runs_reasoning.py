"""Thinking mode (DeepSeek's `reasoning_content`, api-docs.deepseek.com/guides/thinking_mode): streamed as REASONING_*
events and kept as an audit row; the reasoning of a reply is stored with its calls or its answer and sent back in
every later request of the thread (across turns, runs and restarts), which the stub checks (it refuses a request
without it, or with anything but what it sent, with DeepSeek's 400), and nothing of one user's reaches another's
requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from httpx import ASGITransport, AsyncClient
from tests.conftest import User
from tests.runs.conftest import (
    PEAK_TIME,
    THINKING,
    MakeHarness,
    client_messages,
    crewai_config,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    stage_of,
    text_messages,
    types,
)
from tests.stubs.deepseek_stub import RecordedRequest, StubReply, StubToolCall

from agent_runtime.api.app import create_app
from agent_runtime.engine.conversation.metadata import ToolCallMetadata

THOUGHT = "The user greets me; a greeting back is enough."


async def test_streamed_reasoning_becomes_reasoning_events_and_an_audit_row(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    async with make_harness(crewai_config_dir=crewai_config(tmp_path, intent=THINKING)) as h:
        user = make_user()
        sid = await h.new_session(user)
        h.stub.enqueue(intent_direct("Hello!", reasoning_content=THOUGHT, chunk_chars=8))

        result = await h.run(user, sid, "hi")

        assert h.stub.requests[0].body["thinking"] == {"type": "enabled"}
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
        reasoning_kinds = [k for k in kinds if k.startswith("REASONING")]
        assert {e["messageId"] for e in result.of_type(*reasoning_kinds)} == {reasoning_id}
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

        # The answer keeps its reasoning and passes it back in the next turn's call, which carries tools (the
        # stub's strict rule: every earlier assistant message of such a request carries its own reasoning).
        h.stub.enqueue(intent_direct("Again!"))
        result = await h.run(user, sid, "once more")
        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        again = h.stub.requests[-1]
        assert again.body["tools"]
        answers = [m for m in again.messages if m["role"] == "assistant"]
        assert answers == [{"role": "assistant", "content": "Hello!", "reasoning_content": THOUGHT}]


def _tool_turn(turn: int, reasoning: str) -> list[StubReply]:
    """A calculator turn whose tool call comes with `reasoning` (thinking in the execution stage)."""
    call = StubToolCall(id=f"call_{reasoning}", name="calculator", arguments=f'{{"expression": "{turn} + 1"}}')
    return [
        intent_needs(f"Compute {turn} + 1."),
        StubReply(tool_calls=[call], reasoning_content=reasoning),
        execution_done(f"{turn} + 1 = {turn + 1}", {"result": str(turn + 1)}),
        organized(f"It is {turn + 1}."),
    ]


def _tool_reasoning(request: RecordedRequest) -> list[str]:
    """The reasoning sent back on the request's tool-call messages, in order."""
    return [str(m.get("reasoning_content")) for m in request.messages if m.get("tool_calls")]


async def test_tool_reasoning_goes_back_in_every_later_call_across_turns_and_a_restart(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    async with make_harness(crewai_config_dir=crewai_config(tmp_path, execution=THINKING)) as h:
        user = make_user()
        sid = await h.new_session(user)
        for turn, reasoning in enumerate(["first-thought", "second-thought", "third-thought"]):
            h.stub.enqueue(*_tool_turn(turn, reasoning))
            result = await h.run(user, sid, f"what is {turn} + 1?")
            assert types(result.events)[-1] == "RUN_FINISHED", result.body

        # A restart (a new process on the same database): the reasoning comes from the stored rows.
        restarted = create_app(h.settings, clock=lambda: PEAK_TIME)
        async with restarted.router.lifespan_context(restarted):
            engine_requests = len(h.stub.requests)
            h.stub.enqueue(*_tool_turn(3, "fourth-thought"))
            async with AsyncClient(transport=ASGITransport(app=restarted), base_url="http://test") as client:
                response = await client.post(
                    f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "what is 3 + 1?"}
                )
            assert response.status_code == 200 and '"type":"RUN_FINISHED"' in response.text, response.text

        calls = h.stub.requests
        # Every later call of the thread carries the reasoning of every earlier tool call, the thinking ones
        # (execution, which the stub checks) and the others (so all of them share one prompt prefix).
        assert [_tool_reasoning(r) for r in calls[engine_requests:]] == [
            ["first-thought", "second-thought", "third-thought"],
            ["first-thought", "second-thought", "third-thought"],
            ["first-thought", "second-thought", "third-thought", "fourth-thought"],
            ["first-thought", "second-thought", "third-thought", "fourth-thought"],
        ]
        assert [(stage_of(r), r.body["thinking"]["type"]) for r in calls[engine_requests:]] == [
            ("intent", "disabled"),
            ("execution", "enabled"),
            ("execution", "enabled"),
            ("organization", "disabled"),
        ]
        stored = [r.metadata for r in await h.rows(user, sid) if isinstance(r.metadata, ToolCallMetadata)]
        assert [m.reasoning_content for m in stored] == [
            "first-thought",
            "second-thought",
            "third-thought",
            "fourth-thought",
        ]


async def test_no_reasoning_of_one_user_reaches_another_users_requests(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    async with make_harness(crewai_config_dir=crewai_config(tmp_path, execution=THINKING)) as h:
        users = [make_user(), make_user()]
        sessions = [await h.new_session(u) for u in users]
        for turn in range(2):
            for index, (user, sid) in enumerate(zip(users, sessions, strict=True)):
                h.stub.enqueue(*_tool_turn(turn, f"user{index}-turn{turn}"))
                result = await h.run(user, sid, f"what is {turn} + 1?")
                assert types(result.events)[-1] == "RUN_FINISHED", result.body

        by_user: dict[str | None, list[dict[str, Any]]] = {}
        for request in h.stub.requests:
            by_user.setdefault(request.user_id, []).append(request.body)
        # One opaque id per user on every call: two ids, neither the user's own.
        assert len(by_user) == 2 and None not in by_user
        assert not any(str(u.id) in key or u.id.hex in key for u in users for key in by_user if key)
        for bodies in by_user.values():
            text = json.dumps(bodies)
            owners = {name for name in ("user0", "user1") if name in text}
            assert len(owners) == 1, owners
