"""The model's view of a window: no provider sees two user messages in a row, whatever the window holds."""

from __future__ import annotations

from agent_runtime.engine.conversation.chat_messages import AssistantMessage, ChatMessage, UserMessage
from agent_runtime.engine.conversation.summary import summary_message
from agent_runtime.engine.runs.turn.history import TURN_SEPARATOR, ModelTurn, split_turn

SUMMARY = summary_message("They talked about kayaks.", "u-1")


def _seen(turn: ModelTurn) -> list[tuple[str, str]]:
    """What the model is sent after the system prompt: the history, then the stage request (a user message)."""
    return [(m.role, m.content) for m in turn.history] + [("user", turn.request)]


def test_a_summary_before_kept_turns_is_merged_into_the_first_of_them() -> None:
    window: list[ChatMessage] = [
        SUMMARY,
        UserMessage(id="u-2", content="first kept"),
        AssistantMessage(id="a-2", content="answer"),
        UserMessage(id="u-3", content="now"),
    ]

    turn = split_turn(window)

    assert _seen(turn) == [
        ("user", SUMMARY.content + TURN_SEPARATOR + "first kept"),
        ("assistant", "answer"),
        ("user", "now"),
    ]
    assert turn.continuation == []


def test_a_summary_followed_only_by_the_turn_goes_in_front_of_the_request() -> None:
    window: list[ChatMessage] = [SUMMARY, UserMessage(id="u-9", content="a very long question")]

    turn = split_turn(window)

    assert _seen(turn) == [("user", SUMMARY.content + TURN_SEPARATOR + "a very long question")]
    assert turn.continuation == []
