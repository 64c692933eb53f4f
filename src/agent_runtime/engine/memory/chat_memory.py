"""ChatMemory: remember a conversation by id and hand back its window; MessageWindowChatMemory implements it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from agent_runtime.engine.memory.messages import ChatMessage, SystemMessage
from agent_runtime.engine.memory.repository import ChatMemoryRepository, validate_conversation_id
from agent_runtime.engine.memory.window import WindowPolicy, apply_window

logger = logging.getLogger(__name__)


class ChatMemory(Protocol):
    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None: ...

    async def add_one(self, conversation_id: str, message: ChatMessage) -> None: ...

    async def get(self, conversation_id: str, *, policy: WindowPolicy | None = None) -> list[ChatMessage]:
        """The conversation's window (oldest first), under `policy` or the memory's own policy."""
        ...

    async def clear(self, conversation_id: str) -> None: ...


class MessageWindowChatMemory:
    """Appends to a repository and computes the window on read, from a bounded tail.

    Unlike Spring AI's class of the same name, `add` never reads, trims and rewrites the conversation:
    concurrent writers cannot overwrite each other, and nothing stored is ever lost to a trim.
    """

    def __init__(self, repository: ChatMemoryRepository, policy: WindowPolicy | None = None) -> None:
        self._repository = repository
        self._policy = policy or WindowPolicy()

    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        validate_conversation_id(conversation_id)
        if any(isinstance(m, SystemMessage) for m in messages):
            messages = await self._without_repeated_system(conversation_id, messages)
        await self._repository.append(conversation_id, messages)

    async def add_one(self, conversation_id: str, message: ChatMessage) -> None:
        await self.add(conversation_id, [message])

    async def get(self, conversation_id: str, *, policy: WindowPolicy | None = None) -> list[ChatMessage]:
        validate_conversation_id(conversation_id)
        active = policy or self._policy
        read = await self._repository.find_by_conversation_id(conversation_id, max_messages=active.max_messages)
        head: list[ChatMessage] = [read.system] if read.system is not None else []
        window = apply_window([*head, *read.messages], active)
        if window.over_budget:
            logger.warning(
                "chat memory window over budget",
                extra={
                    "conversation_id": conversation_id,
                    "messages": len(window.messages),
                    "tokens": window.token_count,
                },
            )
        return window.messages

    async def clear(self, conversation_id: str) -> None:
        validate_conversation_id(conversation_id)
        await self._repository.delete_by_conversation_id(conversation_id)

    async def _without_repeated_system(
        self, conversation_id: str, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        # A system prompt re-sent unchanged each run would otherwise pile up in storage. Two concurrent adds
        # of the same prompt may both store it; harmless, since the window keeps only the newest.
        current = (await self._repository.find_by_conversation_id(conversation_id, max_messages=1)).system
        kept: list[ChatMessage] = []
        for message in messages:
            if isinstance(message, SystemMessage):
                if current is not None and current.content == message.content:
                    continue
                current = message
            kept.append(message)
        return kept
