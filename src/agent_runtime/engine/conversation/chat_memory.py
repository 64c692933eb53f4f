"""ChatMemory: remember a conversation by id and hand back its window; MessageWindowChatMemory implements it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, Field

from agent_runtime.engine.conversation.chat_messages import ChatMessage, SystemMessage
from agent_runtime.engine.conversation.memory_repository import (
    ChatMemoryRepository,
    WindowMark,
    validate_conversation_id,
)
from agent_runtime.engine.conversation.summary import SummaryRequest, summary_message
from agent_runtime.engine.conversation.window import WindowPlan, WindowPolicy, plan_window

logger = logging.getLogger(__name__)


class ChatMemory(Protocol):
    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None: ...

    async def get(self, conversation_id: str, *, policy: WindowPolicy | None = None) -> list[ChatMessage]:
        """The conversation's window (oldest first), under `policy` or the memory's own policy."""
        ...

    async def clear(self, conversation_id: str) -> None: ...


class Summarizer(Protocol):
    async def summarize(self, request: SummaryRequest) -> str:
        """One summary replacing `request.previous`, covering it and `request.dropped`."""
        ...


class MemoryWindow(BaseModel):
    """What the model is shown of a conversation: system message, summary of the cut turns, recent turns."""

    system: SystemMessage | None
    head: list[ChatMessage] = Field(
        default_factory=list, description="The pinned opening turns (window rule 11), shown before the summary."
    )
    summary: str | None = Field(description="Summary of the conversation before `start_id`; data, not instructions.")
    messages: list[ChatMessage] = Field(description="The recent turns, oldest first, starting at a user message.")
    start_id: str | None
    cut: bool = Field(description="This read moved the start forward (and stored it).")
    token_count: int | None
    over_budget: bool

    def as_messages(self) -> list[ChatMessage]:
        """System message, the pinned opening, then the summary as a data message, then the turns."""
        head: list[ChatMessage] = [self.system] if self.system is not None else []
        head += self.head
        if self.summary is not None and self.start_id is not None:
            head.append(summary_message(self.summary, self.start_id))
        return [*head, *self.messages]


class MessageWindowChatMemory:
    """Appends to a repository and computes the window on read, from a bounded tail.

    Unlike Spring AI's class of the same name, `add` never reads, trims and rewrites the conversation:
    concurrent writers cannot overwrite each other, and nothing stored is ever lost to a trim. The window is
    cache-aware (`window.plan_window`): a read that cuts stores the new start (and, with a `summarizer`, a
    summary of what the cut dropped), so later reads, in any process, start there too.
    """

    def __init__(
        self,
        repository: ChatMemoryRepository,
        policy: WindowPolicy | None = None,
        *,
        summarizer: Summarizer | None = None,
    ) -> None:
        self._repository = repository
        self._policy = policy or WindowPolicy()
        self._summarizer = summarizer

    async def add(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        validate_conversation_id(conversation_id)
        if any(isinstance(m, SystemMessage) for m in messages):
            messages = await self._without_repeated_system(conversation_id, messages)
        await self._repository.append(conversation_id, messages)

    async def get(self, conversation_id: str, *, policy: WindowPolicy | None = None) -> list[ChatMessage]:
        return (await self.window(conversation_id, policy=policy)).as_messages()

    async def window(self, conversation_id: str, *, policy: WindowPolicy | None = None) -> MemoryWindow:
        """The conversation's window; a read that cuts stores the new start (one statement when it does not)."""
        validate_conversation_id(conversation_id)
        active = policy or self._policy
        read = await self._repository.find_by_conversation_id(conversation_id, max_messages=active.max_messages)
        head: list[ChatMessage] = [read.system] if read.system is not None else []
        old = read.mark
        plan = plan_window(
            [*head, *read.messages],
            active,
            read.start_id,
            complete=read.complete,
            head=read.head,
            first_cut=read.mark is None,
        )
        window = plan.window
        if window.over_budget:
            logger.warning(
                "chat memory window over budget",
                extra={
                    "conversation_id": conversation_id,
                    "messages": len(window.messages),
                    "tokens": window.token_count,
                },
            )
        summary = old.summary if old is not None else None
        if plan.cut and plan.start_id is not None:
            summary = await self._cut(conversation_id, active, old, plan, read.system)
        return MemoryWindow(
            system=read.system,
            head=plan.head,
            summary=summary,
            messages=window.messages[len(head) + len(plan.head) :],
            start_id=plan.start_id,
            cut=plan.cut,
            token_count=window.token_count,
            over_budget=window.over_budget,
        )

    async def _cut(
        self,
        conversation_id: str,
        policy: WindowPolicy,
        old: WindowMark | None,
        plan: WindowPlan,
        system: SystemMessage | None,
    ) -> str | None:
        """Store the new start with a summary of what the cut dropped; returns the summary the window shows."""
        start_id = plan.start_id
        if start_id is None:
            raise ValueError("a cut without a start")
        previous = old.summary if old is not None else None
        head_end_id = old.head_end_id if old is not None else plan.head_end_id
        summary: str | None = None
        if self._summarizer is not None:
            dropped = await self._repository.find_between(
                conversation_id,
                from_id=old.start_id if old is not None else head_end_id,
                to_id=start_id,
                # What a cut drops is the old window's oldest part (under max_messages); more only when a long
                # conversation meets the policy for the first time, and then only its newest part is summarised.
                max_messages=2 * policy.max_messages,
            )
            request = SummaryRequest(
                conversation_id=conversation_id, system=system, head=plan.head, previous=previous, dropped=dropped
            )
            try:
                summary = await self._summarizer.summarize(request) if dropped or previous else None
            except Exception:
                # Not stored: the next read cuts again and retries the summary; this one shows the old summary.
                logger.warning("chat memory summary failed", exc_info=True, extra={"conversation_id": conversation_id})
                return previous
        mark = WindowMark(start_id=start_id, summary=summary, head_end_id=head_end_id)
        await self._repository.save_mark(conversation_id, mark)
        return summary

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
