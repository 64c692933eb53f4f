from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from tests.conversation.factories import calls, ids, reply, result, sys_, user

from agent_runtime.engine.conversation import (
    AssistantMessage,
    ChatMessage,
    DuplicateMessageError,
    InMemoryChatMemoryRepository,
    InvalidConversationIdError,
    UserMessage,
    WindowRead,
)
from agent_runtime.engine.errors import BadRequestError


def _yield() -> Awaitable[None]:
    return asyncio.sleep(0)


async def test_fifty_concurrent_appends_lose_nothing() -> None:
    """Every append hands over control between reading and writing back, so without the repository's lock
    the writers interleave there and lose each other's messages. Checked by hand: with the lock removed from
    `append` (issue 15's planted bug) this test kept 1 of 50 messages and the next one 10 of 50."""
    repository = InMemoryChatMemoryRepository(pause_in_append=_yield)
    messages: list[ChatMessage] = [user(f"u{i}", f"message {i}") for i in range(50)]
    await asyncio.gather(*(repository.append("c1", [m]) for m in messages))
    stored = (await repository.find_by_conversation_id("c1", max_messages=100)).messages
    assert sorted(ids(stored)) == sorted(ids(messages))


async def test_concurrent_writers_keep_their_own_order() -> None:
    repository = InMemoryChatMemoryRepository(pause_in_append=_yield)

    async def writer(name: str) -> None:
        for i in range(10):
            await repository.append("c1", [user(f"{name}-{i}")])
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(f"w{n}") for n in range(5)))
    stored = ids((await repository.find_by_conversation_id("c1", max_messages=100)).messages)
    assert len(stored) == 50
    for n in range(5):
        assert [i for i in stored if i.startswith(f"w{n}-")] == [f"w{n}-{i}" for i in range(10)]


async def test_returned_messages_are_copies() -> None:
    repository = InMemoryChatMemoryRepository()
    originals: list[ChatMessage] = [user("u1", "original"), calls("c", "k1")]
    await repository.append("c1", originals)
    first = await repository.find_by_conversation_id("c1", max_messages=10)
    asked, call = first.messages
    assert isinstance(call, AssistantMessage)
    asked.content = "changed"
    call.tool_calls.clear()
    first.messages.clear()
    again = await repository.find_by_conversation_id("c1", max_messages=10)
    assert again == WindowRead(system=None, messages=originals, start_id="u1")


async def test_appended_messages_are_copied_in() -> None:
    repository = InMemoryChatMemoryRepository()
    message = user("u1", "original")
    await repository.append("c1", [message])
    message.content = "changed after append"
    stored = (await repository.find_by_conversation_id("c1", max_messages=10)).messages
    assert [m.content for m in stored] == ["original"]


async def test_duplicate_id_rejects_the_whole_batch() -> None:
    repository = InMemoryChatMemoryRepository()
    await repository.append("c1", [user("u1")])
    with pytest.raises(DuplicateMessageError):
        await repository.append("c1", [reply("a1"), user("u1")])
    await repository.append("c2", [user("u1")])
    stored = (await repository.find_by_conversation_id("c1", max_messages=10)).messages
    assert ids(stored) == ["u1"]


async def test_unknown_conversation_reads_empty() -> None:
    read = await InMemoryChatMemoryRepository().find_by_conversation_id("nope", max_messages=5)
    assert read == WindowRead(system=None, messages=[])


async def test_window_read_is_the_bounded_tail_with_newest_system() -> None:
    repository = InMemoryChatMemoryRepository()
    conversation: list[ChatMessage] = [
        sys_("s1", "a"),
        user("u1"),
        reply("a1"),
        sys_("s2", "b"),
        user("u2"),
        reply("a2"),
        user("u3"),
    ]
    await repository.append("c1", conversation)
    read = await repository.find_by_conversation_id("c1", max_messages=2)
    assert read.system == conversation[3]
    # One more than asked, and `complete` False: the conversation goes on before them.
    assert ids(read.messages) == ["u2", "a2", "u3"]
    assert (read.start_id, read.complete) == ("u1", False)


async def test_window_read_adds_the_newest_user_message_when_the_tail_has_none() -> None:
    repository = InMemoryChatMemoryRepository()
    long_turn: list[ChatMessage] = [
        user("u1"),
        reply("a1"),
        user("u2"),
        calls("c1", "k1"),
        result("r1", "k1"),
        calls("c2", "k2"),
    ]
    await repository.append("c1", [*long_turn, result("r2", "k2"), reply("a2")])
    read = await repository.find_by_conversation_id("c1", max_messages=2)
    assert read.system is None
    assert ids(read.messages) == ["u2", "c2", "r2", "a2"]


async def test_window_read_rejects_an_empty_window() -> None:
    with pytest.raises(BadRequestError):
        await InMemoryChatMemoryRepository().find_by_conversation_id("c1", max_messages=0)


@pytest.mark.parametrize("conversation_id", ["", "   ", "\t\n"])
async def test_repository_rejects_blank_conversation_ids(conversation_id: str) -> None:
    repository = InMemoryChatMemoryRepository()
    with pytest.raises(InvalidConversationIdError):
        await repository.append(conversation_id, [UserMessage(content="x")])
    with pytest.raises(InvalidConversationIdError):
        await repository.find_by_conversation_id(conversation_id, max_messages=1)
    with pytest.raises(InvalidConversationIdError):
        await repository.delete_by_conversation_id(conversation_id)
