from __future__ import annotations

import pytest
from pydantic import ValidationError
from tests.conversation.factories import calls, char_tokens, ids, reply, result, sys_, user

from agent_runtime.engine.conversation import ChatMessage, WindowPolicy, WindowResult, apply_window


def window(messages: list[ChatMessage], max_messages: int = 20, max_tokens: int | None = None) -> WindowResult:
    policy = WindowPolicy(max_messages=max_messages, max_tokens=max_tokens, token_counter=char_tokens)
    return apply_window(messages, policy)


def test_empty_conversation_gives_empty_window() -> None:
    assert window([]) == WindowResult(messages=[], token_count=None, over_budget=False)


def test_only_system_messages_keep_the_newest() -> None:
    assert ids(window([sys_("s1", "a"), sys_("s2", "b"), sys_("s3", "c")]).messages) == ["s3"]


def test_everything_within_budget_is_kept_with_system_first() -> None:
    conversation: list[ChatMessage] = [user("u1"), reply("a1"), sys_("s1"), user("u2"), reply("a2")]
    assert ids(window(conversation).messages) == ["s1", "u1", "a1", "u2", "a2"]


def test_new_different_system_message_replaces_older_ones() -> None:
    conversation: list[ChatMessage] = [
        sys_("s1", "old rules"),
        user("u1"),
        reply("a1"),
        sys_("s2", "new rules"),
        user("u2"),
    ]
    assert ids(window(conversation).messages) == ["s2", "u1", "a1", "u2"]


def test_identical_system_message_re_added_appears_once() -> None:
    conversation: list[ChatMessage] = [
        sys_("s1", "rules"),
        user("u1"),
        reply("a1"),
        sys_("s1-again", "rules"),
        user("u2"),
    ]
    assert ids(window(conversation).messages) == ["s1-again", "u1", "a1", "u2"]


def test_system_message_is_never_evicted() -> None:
    conversation: list[ChatMessage] = [sys_("s1"), user("u1"), reply("a1"), user("u2"), reply("a2")]
    assert ids(window(conversation, max_messages=3).messages) == ["s1", "u2", "a2"]


def test_cut_moves_forward_to_the_next_user_message() -> None:
    # Counting alone would keep a1 (4 of 5 messages); a1 without u1 would be an orphan reply.
    conversation: list[ChatMessage] = [user("u1"), reply("a1"), user("u2"), reply("a2a"), reply("a2b")]
    assert ids(window(conversation, max_messages=4).messages) == ["u2", "a2a", "a2b"]


def test_token_budget_binds_before_the_message_budget() -> None:
    conversation: list[ChatMessage] = [user("u1", "x" * 50), reply("a1", "y" * 50), user("u2", "hi"), reply("a2", "ok")]
    outcome = window(conversation, max_messages=20, max_tokens=20)
    assert outcome == WindowResult(messages=conversation[2:], token_count=3 + 3, over_budget=False)


def test_message_budget_binds_before_the_token_budget() -> None:
    conversation: list[ChatMessage] = [user("u1", "a"), reply("a1", "b"), user("u2", "c"), reply("a2", "d")]
    outcome = window(conversation, max_messages=2, max_tokens=1000)
    assert outcome == WindowResult(messages=conversation[2:], token_count=4, over_budget=False)


def test_system_message_counts_toward_the_token_budget() -> None:
    conversation: list[ChatMessage] = [
        sys_("s1", "r" * 30),
        user("u1", "a"),
        reply("a1", "b"),
        user("u2", "c"),
        reply("a2", "d"),
    ]
    assert ids(window(conversation, max_tokens=31 + 4).messages) == ["s1", "u2", "a2"]
    assert ids(window(conversation, max_tokens=31 + 8).messages) == ["s1", "u1", "a1", "u2", "a2"]


def test_tool_call_and_its_results_are_kept_together() -> None:
    conversation: list[ChatMessage] = [
        user("u1"),
        reply("a1"),
        user("u2"),
        calls("c", "k1", "k2"),
        result("r1", "k1"),
        result("r2", "k2"),
    ]
    assert ids(window(conversation, max_messages=4).messages) == ["u2", "c", "r1", "r2"]


def test_newest_turn_too_long_keeps_its_user_message_and_newest_whole_groups() -> None:
    conversation: list[ChatMessage] = [
        user("u1"),
        reply("a1"),
        user("u2"),
        calls("c1", "k1"),
        result("r1", "k1"),
        calls("c2", "k2", "k3"),
        result("r2", "k2"),
        result("r3", "k3"),
        reply("a2"),
    ]
    # u2 + a2 + the c2 group fit in 5; c1 and r1 would be a sixth and seventh message.
    assert ids(window(conversation, max_messages=5).messages) == ["u2", "c2", "r2", "r3", "a2"]
    # Only 3 fit: the c2 group (3 messages) cannot be split, so it goes whole, and so does everything older.
    assert ids(window(conversation, max_messages=3).messages) == ["u2", "a2"]


def test_one_huge_message_is_kept_alone_and_flagged() -> None:
    conversation: list[ChatMessage] = [sys_("s1", "rules"), user("u1", "small"), reply("a1"), user("u2", "z" * 500)]
    assert window(conversation, max_tokens=100) == WindowResult(
        messages=[conversation[0], conversation[3]], token_count=6 + 501, over_budget=True
    )


def test_huge_old_message_is_evicted() -> None:
    conversation: list[ChatMessage] = [user("u1", "z" * 500), reply("a1"), user("u2", "hi"), reply("a2", "ok")]
    assert ids(window(conversation, max_tokens=100).messages) == ["u2", "a2"]


def test_system_and_user_over_the_message_budget_are_flagged() -> None:
    conversation: list[ChatMessage] = [sys_("s1"), user("u1"), reply("a1")]
    assert window(conversation, max_messages=1) == WindowResult(
        messages=[conversation[0], conversation[1]], token_count=None, over_budget=True
    )


def test_pending_tool_call_is_kept_as_is() -> None:
    conversation: list[ChatMessage] = [user("u1"), calls("c1", "k1", "k2"), result("r1", "k1")]
    assert ids(window(conversation).messages) == ["u1", "c1", "r1"]


def test_window_never_starts_with_an_orphan_reply_or_tool_result() -> None:
    conversation: list[ChatMessage] = [result("r0", "gone"), reply("a0"), user("u1"), reply("a1")]
    assert ids(window(conversation).messages) == ["u1", "a1"]


def test_tool_result_without_its_call_is_left_out() -> None:
    conversation: list[ChatMessage] = [
        user("u1"),
        result("r-orphan", "k9"),
        calls("c1", "k1"),
        result("r-other", "k2"),
        result("r1", "k1"),
    ]
    assert ids(window(conversation).messages) == ["u1", "c1", "r1"]


def test_each_message_is_counted_once_per_call() -> None:
    counted: list[str] = []

    def recording(message: ChatMessage) -> int:
        counted.append(message.id)
        return char_tokens(message)

    conversation: list[ChatMessage] = [
        sys_("s1"),
        user("u1"),
        reply("a1"),
        user("u2"),
        reply("a2"),
        user("u3"),
        reply("a3"),
    ]
    policy = WindowPolicy(max_messages=20, max_tokens=40, token_counter=recording)
    outcome = apply_window(conversation, policy)
    assert ids(outcome.messages) == ["s1", "u3", "a3"]
    assert counted == ["s1", "u3", "a3", "u2", "a2"]


def test_without_a_token_budget_nothing_is_counted() -> None:
    def failing(message: ChatMessage) -> int:
        raise AssertionError("counted without a token budget")

    outcome = apply_window([user("u1"), reply("a1")], WindowPolicy(token_counter=failing))
    assert outcome.token_count is None


@pytest.mark.parametrize("fields", [{"max_messages": 0}, {"max_tokens": 0}, {"model": ""}])
def test_policy_rejects_empty_budgets(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        WindowPolicy.model_validate(fields)


def test_a_cut_keeps_the_newest_turns_of_the_floor_whatever_the_low_water_marks_say() -> None:
    from agent_runtime.engine.conversation import plan_window

    conversation: list[ChatMessage] = [sys_("s")]
    for turn in range(8):
        conversation += [user(f"u{turn}"), reply(f"a{turn}")]
    conversation.append(user("u8"))
    policy = WindowPolicy(max_messages=12, low_messages=2, keep_turns=4, token_counter=char_tokens)
    plan = plan_window(conversation, policy, None)
    assert plan.cut and plan.start_id == "u5"
    assert ids(plan.window.messages) == ["s", "u5", "a5", "u6", "a6", "u7", "a7", "u8"]
    # Without the floor the same marks keep the turn being answered alone.
    alone = plan_window(conversation, policy.model_copy(update={"keep_turns": 1}), None)
    assert ids(alone.window.messages) == ["s", "u8"]
