"""Memory injection (Spring AI's MessageChatMemoryAdvisor): history and prompt merged into the model input.

History stays a list of typed messages; it is never pasted into the system prompt's text, so what users
said earlier cannot pose as instructions.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_runtime.engine.conversation.chat_memory import ChatMemory
from agent_runtime.engine.conversation.chat_messages import ChatMessage, SystemMessage
from agent_runtime.engine.conversation.window import WindowPolicy


def build_model_input(history: Sequence[ChatMessage], prompt: Sequence[ChatMessage]) -> list[ChatMessage]:
    """System message first, then history, then the prompt's messages, each message once.

    The prompt's newest system message replaces the stored one; without one, the history's is used.
    When the prompt starts with the end of the history (e.g. the current user message, already stored, or
    a client resending recent messages), that overlap appears once. Two messages match when their ids are
    equal or, for prompts built without our ids (e.g. from the wire format), when role and content are
    (tool calls and tool call id included). So a prompt that starts by repeating the history's last
    messages word for word counts as overlap; the run flow stores the user message before reading memory,
    so its history always ends with that message and nothing new is lost.
    """
    system = _newest_system(prompt) or _newest_system(history)
    past = [m for m in history if not isinstance(m, SystemMessage)]
    new = [m for m in prompt if not isinstance(m, SystemMessage)]
    overlap = _overlap(past, new)
    head: list[ChatMessage] = [system] if system is not None else []
    return [*head, *past[: len(past) - overlap], *new]


async def with_memory(
    memory: ChatMemory, conversation_id: str, prompt: Sequence[ChatMessage], *, policy: WindowPolicy | None = None
) -> list[ChatMessage]:
    """`build_model_input` over the conversation's current window."""
    return build_model_input(await memory.get(conversation_id, policy=policy), prompt)


def _newest_system(messages: Sequence[ChatMessage]) -> SystemMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, SystemMessage)), None)


def _overlap(past: Sequence[ChatMessage], new: Sequence[ChatMessage]) -> int:
    """Length of the longest end of `past` that `new` starts with."""
    for size in range(min(len(past), len(new)), 0, -1):
        pairs = zip(past[len(past) - size :], new[:size], strict=True)
        if all(_same(a, b) for a, b in pairs):
            return size
    return 0


def _same(a: ChatMessage, b: ChatMessage) -> bool:
    if a.id == b.id:
        return True
    ignored = {"id", "created_at", "metadata"}
    return a.model_dump(exclude=ignored) == b.model_dump(exclude=ignored)
