from __future__ import annotations

from tests.conversation.factories import ids, reply, sys_, user

from agent_runtime.engine.conversation import (
    ChatMessage,
    InMemoryChatMemoryRepository,
    MessageWindowChatMemory,
    WindowPolicy,
    build_model_input,
    from_wire,
    with_memory,
)


def test_prompt_system_message_replaces_the_stored_one_and_goes_first() -> None:
    history: list[ChatMessage] = [sys_("s-old", "old"), user("u1"), reply("a1")]
    prompt: list[ChatMessage] = [user("u2"), sys_("s-new", "new")]
    assert ids(build_model_input(history, prompt)) == ["s-new", "u1", "a1", "u2"]


def test_stored_system_message_is_used_when_the_prompt_has_none() -> None:
    assert ids(build_model_input([sys_("s1"), user("u1"), reply("a1")], [user("u2")])) == ["s1", "u1", "a1", "u2"]


def test_no_system_message_anywhere() -> None:
    assert ids(build_model_input([user("u1"), reply("a1")], [user("u2")])) == ["u1", "a1", "u2"]


def test_current_message_already_stored_appears_once() -> None:
    history: list[ChatMessage] = [sys_("s1"), user("u1"), reply("a1"), user("u2", "new question")]
    prompt: list[ChatMessage] = [sys_("s2"), user("u2", "new question")]
    assert ids(build_model_input(history, prompt)) == ["s2", "u1", "a1", "u2"]


def test_prompt_repeating_the_whole_history_by_id_is_not_duplicated() -> None:
    history: list[ChatMessage] = [user("u1"), reply("a1")]
    prompt: list[ChatMessage] = [user("u1"), reply("a1"), user("u2")]
    assert ids(build_model_input(history, prompt)) == ["u1", "a1", "u2"]


def test_prompt_without_our_ids_matches_by_role_and_content() -> None:
    history: list[ChatMessage] = [user("u1", "hi"), reply("a1", "hello"), user("u2", "how are you")]
    prompt: list[ChatMessage] = [
        from_wire({"role": "user", "content": "how are you"}),
        from_wire({"role": "user", "content": "well?"}),
    ]
    assert build_model_input(history, prompt) == [history[0], history[1], *prompt]


def test_same_content_in_another_role_is_not_overlap() -> None:
    history: list[ChatMessage] = [user("u1", "hi"), reply("a1", "same")]
    prompt: list[ChatMessage] = [user("u2", "same")]
    assert ids(build_model_input(history, prompt)) == ["u1", "a1", "u2"]


def test_prompt_overlapping_the_middle_of_history_is_not_overlap() -> None:
    history: list[ChatMessage] = [user("u1", "q1"), reply("a1", "r1"), user("u2", "q2"), reply("a2", "r2")]
    prompt: list[ChatMessage] = [user("u9", "q1")]
    assert ids(build_model_input(history, prompt)) == ["u1", "a1", "u2", "a2", "u9"]


async def test_with_memory_reads_the_window() -> None:
    memory = MessageWindowChatMemory(InMemoryChatMemoryRepository(), WindowPolicy(max_messages=4))
    await memory.add("c1", [sys_("s1"), user("u1"), reply("a1"), user("u2"), reply("a2"), user("u3")])
    prompt: list[ChatMessage] = [sys_("s2", "fresh"), user("u3")]
    assert ids(await with_memory(memory, "c1", prompt)) == ["s2", "u2", "a2", "u3"]
    assert ids(await with_memory(memory, "c1", prompt, policy=WindowPolicy(max_messages=2))) == ["s2", "u3"]
