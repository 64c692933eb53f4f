"""Long-term memories in what the model sees: recalled by meaning before the flow, shown as an escaped data block
at the end of the turn's user message, after the cached prefix (the system prompt and the history).

Every earlier turn of the session keeps the block it was shown (engine/user_memories: user_memory_recalls), so each
turn's requests start with the previous turn's byte for byte and the provider's prefix cache still hits; only a
memory updated or deleted since changes an old turn's block (a deleted one disappears from it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from uuid import UUID

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.chat_messages import ChatMessage, UserMessage
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.runs.turn.history import split_turn
from agent_runtime.engine.user_memories.service import MemoryService


async def with_recalled_memories(
    memories: MemoryService,
    ctx: RequestContext,
    session_id: UUID,
    window: Sequence[ChatMessage],
    record: Callable[[NewMessage], None],
    *,
    has_memories: bool,
) -> list[ChatMessage]:
    """The window with each user message followed by the memories its turn was shown (this turn's: recalled
    now, by the turn's text; nothing when the user has none)."""
    last = max((i for i, m in enumerate(window) if isinstance(m, UserMessage)), default=None)
    if last is None:
        return list(window)
    request = split_turn(window).request
    recall = await memories.recall(ctx, session_id, request, message_id=window[last].id, searched=has_memories)
    for row in recall.rows:
        record(row)
    shown: list[ChatMessage] = []
    for index, message in enumerate(window):
        block = recall.block_for(message.id, last=index == last) if isinstance(message, UserMessage) else ""
        shown.append(message.model_copy(update={"content": message.content + block}) if block else message)
    return shown
