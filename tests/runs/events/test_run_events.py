"""The run's event emitter keeps the AG-UI stream valid by construction, whatever order the flow calls it in.

The flow happens to close its messages and steps itself today, so end-to-end runs never show what the
emitter adds; these calls drive it directly (no CrewAI, no model), on a real run's event log, and read the
events both as the stream follows them and as the database stored them (what a resumed stream replays).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest
from tests.conftest import User

from agent_runtime.engine.conversation.metadata import UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.agui.mapper import AguiStream
from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.events.log import RunEventLog
from agent_runtime.engine.runs.events.store import EventStore
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate


@dataclass
class Emitter:
    events: RunEvents
    stream: AguiStream
    session_id: UUID


@pytest.fixture
async def emitter(engine: RuntimeEngine, user: User) -> Emitter:
    """RunEvents into the AG-UI stream of a real run's event log (started in the database), RUN_STARTED
    already emitted."""
    session = await engine.sessions.create(user.ctx, SessionCreate())
    turn = [NewMessage(role="user", content="hi", metadata=UserInputMetadata())]
    started = await engine.runs.store.start(user.ctx, session.id, uuid4(), turn)
    assert started is not None
    log = RunEventLog(started.run_id, user.id, EventStore(engine.pool).append)
    stream = AguiStream(thread_id="t-1", run_id="r-1", log=log)
    events = RunEvents(stream.emit)
    events.run_started()
    return Emitter(events, stream, session.id)


async def _frames(emitter: Emitter, engine: RuntimeEngine, user: User) -> list[dict[str, Any]]:
    """The events as a follower of the run reads them; the stored log must hold exactly the same."""
    followed = [event async for event in emitter.stream.stream()]
    await emitter.stream.log.written()
    stored = await EventStore(engine.pool).page(
        user.ctx, emitter.session_id, emitter.stream.log.run_id, after=0, limit=100
    )
    assert stored is not None
    assert [(e.seq, e.data) for e in stored.events] == [(e.seq, e.data) for e in followed]
    assert [e.seq for e in followed] == list(range(1, len(followed) + 1))
    return [json.loads(e.data) for e in followed]


STARTED = {"type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1", "protocolVersion": "1.0"}


async def test_finishing_closes_the_open_message_then_the_open_steps_innermost_first(
    emitter: Emitter, engine: RuntimeEngine, user: User
) -> None:
    events = emitter.events
    events.step_started("execution")
    events.step_started("organization")
    events.text_content("m-1", "Hel")
    events.text_content("m-1", "lo")
    events.run_finished([])
    events.text_content("m-1", "after the end")
    assert await _frames(emitter, engine, user) == [
        STARTED,
        {"type": "STEP_STARTED", "stepName": "execution"},
        {"type": "STEP_STARTED", "stepName": "organization"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m-1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": "Hel"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": "lo"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-1"},
        {"type": "STEP_FINISHED", "stepName": "organization"},
        {"type": "STEP_FINISHED", "stepName": "execution"},
        {"type": "RUN_FINISHED", "threadId": "t-1", "runId": "r-1"},
    ]


async def test_an_error_closes_what_is_open_and_nothing_follows_it(
    emitter: Emitter, engine: RuntimeEngine, user: User
) -> None:
    events = emitter.events
    events.step_started("intent")
    events.text_content("m-1", "partial")
    events.run_error(code="run_timeout", message="too slow")
    events.step_finished("intent")
    events.run_finished([])
    assert await _frames(emitter, engine, user) == [
        STARTED,
        {"type": "STEP_STARTED", "stepName": "intent"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m-1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": "partial"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-1"},
        {"type": "STEP_FINISHED", "stepName": "intent"},
        {"type": "RUN_ERROR", "message": "too slow", "code": "run_timeout"},
    ]


async def test_a_tool_call_and_a_new_message_each_close_the_open_message_first(
    emitter: Emitter, engine: RuntimeEngine, user: User
) -> None:
    events = emitter.events
    events.text_content("m-1", "Let me compute.")
    events.tool_call(tool_call_id="c-1", name="calculator", arguments='{"expression":"6*7"}', parent_message_id="m-1")
    events.tool_result(message_id="tr-1", tool_call_id="c-1", content='{"result":"42"}')
    events.text_content("m-2", "It is ")
    events.text_content("m-3", "42.")
    events.run_finished([])
    assert await _frames(emitter, engine, user) == [
        STARTED,
        {"type": "TEXT_MESSAGE_START", "messageId": "m-1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": "Let me compute."},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-1"},
        {"type": "TOOL_CALL_START", "toolCallId": "c-1", "toolCallName": "calculator", "parentMessageId": "m-1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c-1", "delta": '{"expression":"6*7"}'},
        {"type": "TOOL_CALL_END", "toolCallId": "c-1"},
        {
            "type": "TOOL_CALL_RESULT",
            "messageId": "tr-1",
            "toolCallId": "c-1",
            "content": '{"result":"42"}',
            "role": "tool",
        },
        {"type": "TEXT_MESSAGE_START", "messageId": "m-2", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-2", "delta": "It is "},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-2"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m-3", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-3", "delta": "42."},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-3"},
        {"type": "RUN_FINISHED", "threadId": "t-1", "runId": "r-1"},
    ]


async def test_reasoning_and_a_messages_snapshot_close_what_is_open(
    emitter: Emitter, engine: RuntimeEngine, user: User
) -> None:
    events = emitter.events
    events.reasoning_content("r-1", "Thinking")
    events.text_content("m-1", "Half an answ")
    events.messages_snapshot([])
    events.run_finished([], pending_tool_call_ids=["c-9"])
    assert await _frames(emitter, engine, user) == [
        STARTED,
        {"type": "REASONING_START", "messageId": "r-1"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r-1", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r-1", "delta": "Thinking"},
        {"type": "REASONING_MESSAGE_END", "messageId": "r-1"},
        {"type": "REASONING_END", "messageId": "r-1"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m-1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": "Half an answ"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-1"},
        {"type": "MESSAGES_SNAPSHOT", "messages": []},
        {
            "type": "RUN_FINISHED",
            "threadId": "t-1",
            "runId": "r-1",
            "outcome": {"type": "success", "pendingToolCallIds": ["c-9"]},
        },
    ]
