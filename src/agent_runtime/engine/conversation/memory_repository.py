"""Where conversations are stored: an append-only repository protocol and its in-memory implementation (the
PostgreSQL one is `postgres.py`, its statements are in `repository.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from pydantic import BaseModel, Field

from agent_runtime.engine.conversation.chat_messages import ChatMessage, SystemMessage, UserMessage
from agent_runtime.engine.conversation.errors import DuplicateMessageError, InvalidConversationIdError
from agent_runtime.engine.errors import BadRequestError


class WindowMark(BaseModel):
    """Where the cache-aware window starts (`window.plan_window`), stored at each cut; and the summary of what
    the cuts dropped, replaced only at the next cut. Marks only move forward."""

    start_id: str = Field(min_length=1, description="Id of the user message the window starts at.")
    summary: str | None = Field(default=None, description="Summary of the conversation before the start.")
    head_end_id: str | None = Field(
        default=None,
        description="The user message after the pinned opening turns (window rule 11); None: no head pinned. Each "
        "later mark carries the first one's.",
    )


class WindowRead(BaseModel):
    """The bounded read the window is computed from.

    `mark` is the conversation's newest stored `WindowMark` (None before the first cut). `messages` (oldest
    first) are the newest `max_messages` + 1 non-system messages at or after the mark's start (one more than
    asked, so that `complete` is known: False when there are more than `max_messages`), preceded by the newest
    user message when none of them is a user message (its turn is the newest one, and the window keeps at
    least that user message). `system` is the newest system message, wherever it is. Messages older than
    this are outside any window of at most `max_messages` messages by construction: a kept turn lies
    entirely within the newest `max_messages` messages, so the window is the same as over the whole
    conversation. (A stray tool result with no call before it, which the engine never writes, takes a
    place in the read but not in the window; the window is then still valid, possibly shorter.)
    """

    system: SystemMessage | None = None
    messages: list[ChatMessage] = Field(default_factory=list)
    mark: WindowMark | None = None
    head: list[ChatMessage] = Field(
        default_factory=list, description="The pinned opening (everything before the mark's `head_end_id`)."
    )
    start_id: str | None = Field(
        default=None, description="Where the window starts: the mark's start, else the first user message."
    )
    complete: bool = Field(
        default=True, description="`messages` hold everything from the start (at most max_messages of them)."
    )


class ChatMemoryRepository(Protocol):
    """Append-only storage of conversations. Nothing is ever rewritten; the window is a bounded read."""

    async def find_by_conversation_id(self, conversation_id: str, *, max_messages: int) -> WindowRead:
        """The bounded tail of a conversation (see `WindowRead`); empty for an unknown conversation."""
        ...

    async def save_mark(self, conversation_id: str, mark: WindowMark) -> bool:
        """Store `mark` when its start is a stored user message after the current mark's start; returns whether
        it was stored (False: another writer already moved the start as far or further, or no such message)."""
        ...

    async def find_between(
        self, conversation_id: str, *, from_id: str | None, to_id: str, max_messages: int
    ) -> list[ChatMessage]:
        """The newest `max_messages` non-system messages from `from_id` (None: the beginning) up to but
        excluding `to_id`, oldest first: what a cut drops, for its summary."""
        ...

    async def append(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        """Store `messages` after everything already stored, all or none, in the order given.

        Raises `DuplicateMessageError` when a message id is already stored in this conversation.
        """
        ...

    async def delete_by_conversation_id(self, conversation_id: str) -> None: ...


def validate_conversation_id(conversation_id: str) -> str:
    if not conversation_id.strip():
        raise InvalidConversationIdError("conversation id must not be empty or whitespace")
    return conversation_id


def bounded_tail(conversation: Sequence[ChatMessage], max_messages: int, mark: WindowMark | None = None) -> WindowRead:
    """The `WindowRead` of a whole conversation: what every repository returns, however it reads."""
    if max_messages < 1:
        raise BadRequestError("max_messages must be at least 1")
    system = next((m for m in reversed(conversation) if isinstance(m, SystemMessage)), None)
    rest = [m for m in conversation if not isinstance(m, SystemMessage)]
    # Without a mark the window starts at the first user message (nothing before it belongs to a turn).
    first_user = next((i for i, m in enumerate(rest) if isinstance(m, UserMessage)), None)
    start = _position(rest, mark.start_id) if mark is not None else (first_user or 0)
    start_id = mark.start_id if mark is not None else (rest[first_user].id if first_user is not None else None)
    tail = rest[start:][-(max_messages + 1) :]
    if not any(isinstance(m, UserMessage) for m in tail):
        older = rest[: len(rest) - len(tail)]
        anchor = next((m for m in reversed(older) if isinstance(m, UserMessage)), None)
        if anchor is not None:
            tail = [anchor, *tail]
    complete = len(rest) - start <= max_messages
    head: list[ChatMessage] = []
    if mark is not None and mark.head_end_id is not None:
        head = list(rest[first_user or 0 : _position(rest, mark.head_end_id)][:max_messages])
    return WindowRead(system=system, messages=tail, mark=mark, head=head, start_id=start_id, complete=complete)


def _position(messages: Sequence[ChatMessage], message_id: str) -> int:
    return next((i for i, m in enumerate(messages) if m.id == message_id), 0)


def messages_between(
    conversation: Sequence[ChatMessage], *, from_id: str | None, to_id: str, max_messages: int
) -> list[ChatMessage]:
    """`ChatMemoryRepository.find_between` over a whole conversation."""
    rest: list[ChatMessage] = [m for m in conversation if not isinstance(m, SystemMessage)]
    first = _position(rest, from_id) if from_id is not None else 0
    end = next((i for i, m in enumerate(rest) if m.id == to_id), None)
    if end is None or max_messages < 1:
        return []
    return rest[first:end][-max_messages:]


class InMemoryChatMemoryRepository:
    """For tests and single-process development: lost on restart, not shared between replicas.

    `pause_in_append` is awaited inside `append` between reading the stored messages and writing them back,
    where a real store waits for I/O: a test can hand over control there to make writers interleave (without
    the lock they then lose each other's messages; with it they cannot).
    """

    def __init__(self, *, pause_in_append: Callable[[], Awaitable[None]] | None = None) -> None:
        self._pause_in_append = pause_in_append
        # Insertion order of this dict is the order conversations were started.
        self._conversations: dict[str, list[ChatMessage]] = {}
        self._marks: dict[str, WindowMark] = {}
        self._lock: asyncio.Lock | None = None

    def _guard(self) -> asyncio.Lock:
        # Created on first use, inside a running event loop, never when the instance is built.
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def find_by_conversation_id(self, conversation_id: str, *, max_messages: int) -> WindowRead:
        validate_conversation_id(conversation_id)
        async with self._guard():
            read = bounded_tail(
                self._conversations.get(conversation_id, []), max_messages, self._marks.get(conversation_id)
            )
            return read.model_copy(deep=True)

    async def save_mark(self, conversation_id: str, mark: WindowMark) -> bool:
        validate_conversation_id(conversation_id)
        async with self._guard():
            stored = self._conversations.get(conversation_id, [])
            new = next((i for i, m in enumerate(stored) if m.id == mark.start_id), None)
            if new is None or not isinstance(stored[new], UserMessage):
                return False
            current = self._marks.get(conversation_id)
            if current is not None and new <= next(i for i, m in enumerate(stored) if m.id == current.start_id):
                return False
            self._marks[conversation_id] = mark.model_copy()
            return True

    async def find_between(
        self, conversation_id: str, *, from_id: str | None, to_id: str, max_messages: int
    ) -> list[ChatMessage]:
        validate_conversation_id(conversation_id)
        async with self._guard():
            found = messages_between(
                self._conversations.get(conversation_id, []), from_id=from_id, to_id=to_id, max_messages=max_messages
            )
            return [m.model_copy(deep=True) for m in found]

    async def append(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        validate_conversation_id(conversation_id)
        if not messages:
            return
        copies = [m.model_copy(deep=True) for m in messages]
        async with self._guard():
            stored = self._conversations.get(conversation_id, [])
            known = {m.id for m in stored}
            for message in copies:
                if message.id in known:
                    raise DuplicateMessageError(f"message {message.id!r} is already stored in this conversation")
                known.add(message.id)
            if self._pause_in_append is not None:
                await self._pause_in_append()
            self._conversations[conversation_id] = [*stored, *copies]

    async def delete_by_conversation_id(self, conversation_id: str) -> None:
        validate_conversation_id(conversation_id)
        async with self._guard():
            self._conversations.pop(conversation_id, None)
            self._marks.pop(conversation_id, None)
