from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from tests.conversation.factories import char_tokens, ids, reply, sys_, user

from agent_runtime.engine.conversation import (
    ChatMessage,
    InMemoryChatMemoryRepository,
    InvalidConversationIdError,
    MessageWindowChatMemory,
    UserMessage,
    WindowPolicy,
    WindowRead,
)


class RecordingRepository(InMemoryChatMemoryRepository):
    """Records every append, to show what the memory writes (and that it never rewrites)."""

    def __init__(self) -> None:
        super().__init__()
        self.appended: list[list[str]] = []

    async def append(self, conversation_id: str, messages: Sequence[ChatMessage]) -> None:
        self.appended.append(ids(messages))
        await super().append(conversation_id, messages)


async def test_add_then_get_returns_the_window() -> None:
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository(), WindowPolicy(max_messages=3))
    await memory.add("c1", [sys_("s1"), user("u1"), reply("a1")])
    await memory.add("c1", [user("u2")])
    await memory.add("c1", [reply("a2")])
    assert ids(await memory.get("c1")) == ["s1", "u2", "a2"]


async def test_policy_can_be_overridden_per_call() -> None:
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository(), WindowPolicy(max_messages=2))
    await memory.add("c1", [user("u1", "a" * 40), reply("a1"), user("u2"), reply("a2")])
    assert ids(await memory.get("c1", policy=WindowPolicy(max_messages=10))) == ["u1", "a1", "u2", "a2"]
    tokens = WindowPolicy(max_messages=10, max_tokens=30, token_counter=char_tokens)
    assert ids(await memory.get("c1", policy=tokens)) == ["u2", "a2"]
    assert ids(await memory.get("c1")) == ["u2", "a2"]
    # That cut is stored: the start only moves forward, so a wider policy does not bring u1 back.
    assert ids(await memory.get("c1", policy=WindowPolicy(max_messages=10))) == ["u2", "a2"]


async def test_add_only_appends() -> None:
    repository = RecordingRepository()
    memory = MessageWindowChatMemory(repository, WindowPolicy(max_messages=2))
    await memory.add("c1", [user("u1"), reply("a1")])
    await memory.add("c1", [user("u2"), reply("a2")])
    assert repository.appended == [["u1", "a1"], ["u2", "a2"]]
    assert ids((await repository.find_by_conversation_id("c1", max_messages=10)).messages) == ["u1", "a1", "u2", "a2"]


async def test_identical_system_message_is_not_stored_twice() -> None:
    repository = RecordingRepository()
    memory = MessageWindowChatMemory(repository)
    await memory.add("c1", [sys_("s1", "rules"), user("u1")])
    await memory.add("c1", [sys_("s2", "rules"), user("u2"), sys_("s3", "rules")])
    await memory.add("c1", [sys_("s4", "new rules"), user("u3")])
    assert repository.appended == [["s1", "u1"], ["u2"], ["s4", "u3"]]
    assert ids(await memory.get("c1")) == ["s4", "u1", "u2", "u3"]


async def test_fifty_concurrent_adds_lose_nothing() -> None:
    """The repository hands over control inside each append (where a real store waits for I/O), so the adds
    really interleave. Checked by hand: without the in-memory repository's lock this test failed."""
    repository = InMemoryChatMemoryRepository(pause_in_append=lambda: asyncio.sleep(0))
    memory = MessageWindowChatMemory(repository, WindowPolicy(max_messages=100))
    messages: list[ChatMessage] = [user(f"u{i}") for i in range(50)]
    await asyncio.gather(*(memory.add("c1", [m]) for m in messages))
    assert sorted(ids(await memory.get("c1"))) == sorted(ids(messages))


async def test_clear_forgets_the_conversation() -> None:
    repository = InMemoryChatMemoryRepository()
    memory = MessageWindowChatMemory(repository)
    await memory.add("c1", [user("u1"), reply("a1")])
    await memory.add("c2", [user("u2")])
    await memory.clear("c1")
    assert await memory.get("c1") == []
    assert ids((await repository.find_by_conversation_id("c2", max_messages=5)).messages) == ["u2"]
    assert await repository.find_by_conversation_id("c1", max_messages=5) == WindowRead()


async def test_over_budget_window_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository(), WindowPolicy(max_messages=1))
    await memory.add("c1", [sys_("s1"), user("u1")])
    with caplog.at_level(logging.WARNING, logger="agent_runtime.engine.conversation"):
        assert ids(await memory.get("c1")) == ["s1", "u1"]
    assert [(r.getMessage(), getattr(r, "conversation_id", None)) for r in caplog.records] == [
        ("chat memory window over budget", "c1")
    ]


@pytest.mark.parametrize("conversation_id", ["", " ", "\n"])
async def test_blank_conversation_ids_are_rejected(conversation_id: str) -> None:
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository())
    with pytest.raises(InvalidConversationIdError):
        await memory.add(conversation_id, [UserMessage(content="x")])
    with pytest.raises(InvalidConversationIdError):
        await memory.add(conversation_id, [UserMessage(content="x")])
    with pytest.raises(InvalidConversationIdError):
        await memory.get(conversation_id)
    with pytest.raises(InvalidConversationIdError):
        await memory.clear(conversation_id)
