from __future__ import annotations

from tests.memory.factories import calls, ids, reply, result, sys_, user

from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.memory import ChatMessage, WindowPolicy, apply_window, litellm_token_counter, to_wire

MODEL = "deepseek/deepseek-chat"


def test_litellm_counter_works_offline_and_bounds_the_whole_count() -> None:
    conversation: list[ChatMessage] = [
        sys_("s1"),
        user("u1", "北京今天天气怎么样?"),
        calls("c1", "k1"),
        result("r1", "k1", "晴, 25°C"),
    ]
    counter = litellm_token_counter(MODEL)
    per_message = [counter(m) for m in conversation]
    whole = load_litellm().token_counter(model=MODEL, messages=[to_wire(m) for m in conversation])
    assert all(count > 0 for count in per_message)
    assert whole <= sum(per_message)
    assert counter(calls("c2", "k1")) == per_message[2], "same wire form, same count (cached by content)"
    assert litellm_token_counter(MODEL) is counter


def test_default_policy_counts_with_litellm() -> None:
    long_answer = reply("a1", "lorem ipsum dolor sit amet " * 200)
    conversation: list[ChatMessage] = [user("u1"), long_answer, user("u2"), reply("a2", "short")]
    counter = litellm_token_counter(MODEL)
    budget = counter(conversation[2]) + counter(conversation[3]) + counter(conversation[0])
    outcome = apply_window(conversation, WindowPolicy(max_tokens=budget, model=MODEL))
    assert ids(outcome.messages) == ["u2", "a2"]
    assert outcome.token_count == counter(conversation[2]) + counter(conversation[3])
