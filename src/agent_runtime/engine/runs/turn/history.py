"""What the model sees of a thread: the memory window, reshaped so that no provider sees two user turns in a row.

Stored rows stay as they are (append-only); only the model's view is reshaped, where the run reads the window:
- the turn being answered is the run of user messages at the end of the window (a turn whose run failed got
  no answer, so it is part of the question now): their texts are joined into this turn's request;
- older consecutive user messages (an unanswered turn followed by an answered one, or the memory's summary
  of cut turns, a user message of data, followed by the first kept turn) are merged into one; a summary
  followed by nothing but the turn itself goes in front of the turn's request;
- whatever follows the last user message (the tool calls and results of a turn that was waiting for
  approvals or for the client's tool results) is the turn's continuation, handed back to its stage.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from agent_runtime.engine.conversation.chat_messages import (
    TURN_SEPARATOR,
    ChatMessage,
    UserMessage,
    merge_consecutive_users,
    user_text,
)
from agent_runtime.engine.conversation.summary import SUMMARY_ID_PREFIX


class ModelTurn(BaseModel):
    history: list[ChatMessage]
    request: str
    continuation: list[ChatMessage]


def _is_summary(message: ChatMessage) -> bool:
    # The memory's summary of cut turns (a user message of data, first in the window): history, not the turn.
    return message.id.startswith(SUMMARY_ID_PREFIX)


def split_turn(window: Sequence[ChatMessage]) -> ModelTurn:
    """The window (oldest first, ending with the turn being answered) as history, request and continuation."""
    last = max((i for i, m in enumerate(window) if isinstance(m, UserMessage)), default=None)
    if last is None:
        return ModelTurn(history=merge_consecutive_users(window), request="", continuation=[])
    first = last
    while first > 0 and isinstance(window[first - 1], UserMessage) and not _is_summary(window[first - 1]):
        first -= 1
    # With each message's image markers (user_text): the gateway turns them into the images of the turn.
    request = TURN_SEPARATOR.join(user_text(m) for m in window[first : last + 1] if isinstance(m, UserMessage))
    history = merge_consecutive_users(window[:first])
    if history and isinstance(history[-1], UserMessage):
        # Only the summary ends a history as a user message (the window kept nothing but this turn after a cut):
        # it goes in front of the request, which is a user message too.
        summary = history.pop()
        request = summary.content + TURN_SEPARATOR + request
    return ModelTurn(history=history, request=request, continuation=list(window[last + 1 :]))
