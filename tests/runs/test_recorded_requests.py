"""The model requests a set of conversations sends, byte for byte, against recordings committed before the stages
moved onto the app's loop (issue 30): the prompt layout, the cache prefix and the contracts stay what they were.

Each conversation runs through the whole service (HTTP, the run service, the flow, LiteLLM) against the stub, which
keeps every request body as it arrived. Users have fixed ids, so the opaque end-user id each request carries is the
same in every run. `RECORD_REQUESTS=1 uv run pytest tests/runs/test_recorded_requests.py` writes the recordings
again; a change to them is a change to what every user's model is sent (and to what the provider has cached).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from httpx import ASGITransport, AsyncClient
from tests.conftest import TEST_JWT_SECRET, User
from tests.runs.conftest import (
    PEAK_TIME,
    THINKING,
    Harness,
    MakeHarness,
    crewai_config,
    execution_done,
    intent_direct,
    intent_needs,
    organized,
    types,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

from agent_runtime.api.app import create_app
from agent_runtime.engine.auth import mint_token
from agent_runtime.engine.context import RequestContext
from agent_runtime.settings import Settings

RECORDINGS = Path(__file__).parent / "recorded_requests"
RECORD = os.environ.get("RECORD_REQUESTS") == "1"
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABXvMqGgAAAABJRU5ErkJggg=="


class FixedUser(User):
    """A user whose id, and so the end-user id of every request, is the same in every run."""

    def __init__(self, settings: Settings, number: int) -> None:
        self.id = UUID(int=0x7EC0_0000_0000 + number)
        self.ctx = RequestContext(user_id=self.id)
        self.headers = {"Authorization": f"Bearer {mint_token(settings, self.id)}"}


def calc(call_id: str, expression: str) -> StubReply:
    return StubReply(
        tool_calls=[StubToolCall(id=call_id, name="calculator", arguments=json.dumps({"expression": expression}))]
    )


def finished(result: Any) -> None:
    assert result.status == 200, result.body
    assert types(result.events)[-1] == "RUN_FINISHED", result.body


async def direct_answer(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("Hello! How can I help?"))
    finished(await h.run(user, sid, "hi there"))
    h.stub.enqueue(intent_direct("Doing well."))
    finished(await h.run(user, sid, "how are you?"))


async def tool_turn(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute 17 + 25."),
        calc("call_t1", "17 + 25"),
        execution_done("17 + 25 = 42", {"result": "42"}),
        organized("17 + 25 is 42."),
    )
    finished(await h.run(user, sid, "what is 17 + 25?"))
    # Two calls in one reply, then the next turn on the history with tool turns in it.
    h.stub.enqueue(
        intent_needs("Compute 2 * 3 and 10 / 4."),
        StubReply(
            tool_calls=[
                StubToolCall(id="call_t2", name="calculator", arguments='{"expression": "2 * 3"}'),
                StubToolCall(id="call_t3", name="calculator", arguments='{"expression": "10 / 4"}'),
            ]
        ),
        execution_done("6 and 2.5", {"products": ["6", "2.5"]}),
        organized("6 and 2.5."),
    )
    finished(await h.run(user, sid, "and 2 * 3, and 10 / 4?"))
    h.stub.enqueue(intent_direct("You're welcome."))
    finished(await h.run(user, sid, "thanks"))


def _agui(sid: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"threadId": sid, "runId": "r", "messages": messages, "state": {}, "tools": [], "context": [], **extra}


BIO_TURN = [{"id": "u-1", "role": "user", "content": "set my bio to kayaking"}]


async def _bio_interrupt(h: Harness, user: User) -> str:
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Set the user's bio."),
        StubReply(tool_calls=[StubToolCall(id="call_bio", name="update_bio", arguments='{"bio": "Kayaker"}')]),
    )
    finished(await h.agui(user, _agui(sid, BIO_TURN)))
    return sid


RESUME = [{"interruptId": "approve-call_bio", "status": "resolved"}]


async def approval(h: Harness, user: User) -> None:
    sid = await _bio_interrupt(h, user)
    h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker"}), organized("Your bio is updated."))
    finished(await h.agui(user, _agui(sid, BIO_TURN, resume=RESUME)))


async def approval_across_a_restart(h: Harness, user: User) -> None:
    sid = await _bio_interrupt(h, user)
    restarted = create_app(h.settings, clock=lambda: PEAK_TIME)
    async with restarted.router.lifespan_context(restarted):
        h.stub.enqueue(execution_done("Bio updated.", {"bio": "Kayaker"}), organized("Your bio is updated."))
        async with AsyncClient(transport=ASGITransport(app=restarted), base_url="http://test") as client:
            response = await client.post("/v1/agui", headers=user.headers, json=_agui(sid, BIO_TURN, resume=RESUME))
        assert response.status_code == 200 and '"type":"RUN_FINISHED"' in response.text, response.text


CONFETTI = {
    "name": "show_confetti",
    "description": "Celebrate on the user's screen.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}


async def frontend_tool(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    first = {"id": "u-1", "role": "user", "content": "celebrate with show_confetti!"}
    h.stub.enqueue(
        intent_needs("Celebrate with the confetti tool."),
        StubReply(tool_calls=[StubToolCall(id="call_fe", name="show_confetti", arguments='{"color": "gold"}')]),
    )
    finished(await h.agui(user, _agui(sid, [first], tools=[CONFETTI], protocolVersion="1.0")))
    call = {
        "id": "a-1",
        "role": "assistant",
        "toolCalls": [
            {
                "id": "call_fe",
                "type": "function",
                "function": {"name": "show_confetti", "arguments": '{"color": "gold"}'},
            }
        ],
    }
    result = {"id": "t-1", "role": "tool", "toolCallId": "call_fe", "content": '{"shown": true}'}
    h.stub.enqueue(execution_done("Confetti shown.", {"shown": True}), organized("Confetti!"))
    finished(await h.agui(user, _agui(sid, [first, call, result], tools=[CONFETTI], protocolVersion="1.0")))


async def regenerate(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    h.stub.enqueue(intent_needs("Compute 6 * 7."), calc("call_r1", "6 * 7"), execution_done("42", {"r": "42"}))
    h.stub.enqueue(organized("It is 42."))
    finished(await h.run(user, sid, "what is 6 * 7?"))
    h.stub.enqueue(intent_direct("6 * 7 = 42."))
    finished(await h.run_body(user, sid, {"regenerate": True}))
    h.stub.enqueue(intent_direct("Sure."))
    finished(await h.run(user, sid, "ok"))


async def image(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "data", "value": PNG_B64, "mimeType": "image/png"}},
    ]
    h.stub.enqueue(intent_direct("A red pixel."))
    finished(
        await h.agui(user, {**_agui(sid, [{"id": "u-1", "role": "user", "content": parts}]), "protocolVersion": "1.0"})
    )
    h.stub.enqueue(intent_direct("Still red."))
    finished(await h.run(user, sid, "and now?"))


async def thinking(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    for turn, thought in enumerate(["first-thought", "second-thought"]):
        h.stub.enqueue(
            intent_needs(f"Compute {turn} + 1."),
            StubReply(
                tool_calls=[
                    StubToolCall(id=f"call_{thought}", name="calculator", arguments=f'{{"expression": "{turn} + 1"}}')
                ],
                reasoning_content=thought,
            ),
            StubReply(content=execution_done(f"{turn} + 1", {"r": str(turn + 1)}).content, reasoning_content="as json"),
            organized(f"It is {turn + 1}."),
        )
        finished(await h.run(user, sid, f"what is {turn} + 1?"))


async def repair_blank(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    h.stub.enqueue(StubReply(content="   "), intent_direct("Hi again."))
    finished(await h.run(user, sid, "hello"))


async def repair_truncated(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute 1 + 2."),
        calc("call_c1", "1 + 2"),
        # Longer than the execution task's max_tokens (1024): the stub cuts it there, finish_reason "length".
        execution_done("1 + 2 = 3 " + "and so on " * 600, {"r": "3"}),
        execution_done("1 + 2 = 3", {"r": "3"}),
        organized("3."),
    )
    finished(await h.run(user, sid, "1 + 2?"))


async def prose_after_tool_results(h: Harness, user: User) -> None:
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute 2+2."),
        calc("call_p1", "2+2"),
        StubReply(content="The answer is 4."),
        execution_done("2+2=4", {"result": "4"}),
        organized("It is 4."),
    )
    finished(await h.run(user, sid, "what is 2+2?"))


Conversation = Callable[[Harness, User], Awaitable[None]]
CONVERSATIONS: dict[str, tuple[Conversation, dict[str, dict[str, Any]]]] = {
    "direct_answer": (direct_answer, {}),
    "tool_turn": (tool_turn, {}),
    "approval": (approval, {}),
    "approval_across_a_restart": (approval_across_a_restart, {}),
    "frontend_tool": (frontend_tool, {}),
    "regenerate": (regenerate, {}),
    "image": (image, {}),
    "thinking": (thinking, {"execution": THINKING}),
    "repair_blank": (repair_blank, {}),
    "repair_truncated": (repair_truncated, {}),
    "prose_after_tool_results": (prose_after_tool_results, {}),
}


@pytest.mark.parametrize("name", list(CONVERSATIONS))
async def test_the_model_gets_the_recorded_requests_byte_for_byte(
    name: str, make_harness: MakeHarness, settings: Settings, tmp_path: Path
) -> None:
    conversation, tasks = CONVERSATIONS[name]
    overrides = {"crewai_config_dir": crewai_config(tmp_path, **tasks)} if tasks else {}
    async with make_harness(**overrides) as h:
        await conversation(h, FixedUser(settings, list(CONVERSATIONS).index(name)))
        sent = [request.raw.decode() for request in h.stub.requests]
    assert settings.jwt_secret.get_secret_value() == TEST_JWT_SECRET  # the end-user ids are derived from it
    path = RECORDINGS / f"{name}.json"
    if RECORD:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(sent, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    recorded: list[str] = json.loads(path.read_text(encoding="utf-8"))
    # Parsed first, for a readable difference; then the bytes themselves.
    assert [json.loads(body) for body in sent] == [json.loads(body) for body in recorded]
    assert sent == recorded
