"""A long conversation: the model sees the chat-memory window (the newest turns, starting at a user turn), not
the whole history."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from tests.conftest import User
from tests.runs.conftest import Harness, intent_direct, types

from agent_runtime.engine.messages.metadata import AssistantOutputMetadata, UserInputMetadata
from agent_runtime.engine.messages.models import NewMessage


async def test_the_model_sees_the_window_of_a_long_conversation(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    earlier: list[NewMessage] = []
    for turn in range(15):
        earlier.append(NewMessage(role="user", content=f"question {turn}", metadata=UserInputMetadata()))
        earlier.append(NewMessage(role="assistant", content=f"answer {turn}", metadata=AssistantOutputMetadata()))
    await h.engine.messages.append(user.ctx, UUID(sid), earlier)
    assert h.settings.memory_max_messages == 20
    h.stub.enqueue(intent_direct("Noted."))

    result = await h.run(user, sid, "question 15")

    assert types(result.events)[-1] == "RUN_FINISHED"
    (request,) = h.stub.requests
    # 20 messages with the new one: the newest 19 of the 30 stored would start at "answer 5", so the cut
    # moves to the next user turn, "question 6".
    history = request.messages[1:-1]
    assert history == [
        message
        for turn in range(6, 15)
        for message in (
            {"role": "user", "content": f"question {turn}"},
            {"role": "assistant", "content": f"answer {turn}"},
        )
    ]
    assert request.messages[0]["role"] == "system"
