from __future__ import annotations

import logging

import pytest
from tests.conversation.factories import calls, ids, reply, result, sys_, user

from agent_runtime.engine.conversation import ChatMessage, WindowPolicy, apply_window, to_wire, token_counter_for
from agent_runtime.engine.conversation.tokens import LiteLLMTokenCounter
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.tokenizer import TokenizerInfo, tokenizer_info

MODEL = "deepseek/deepseek-flash"
CONVERSATION: list[ChatMessage] = [
    sys_("s1"),
    user("u1", "北京今天天气怎么样?"),
    reply("a1", "It is sunny and 25 degrees in Beijing today."),
    calls("c1", "k1"),
    result("r1", "k1", "晴, 25°C"),
]


def _content_tokens(message: ChatMessage) -> int:
    """Tokens of the message's text and tool calls alone, with DeepSeek's own tokenizer."""
    from litellm.utils import select_tokenizer

    wire = to_wire(message)
    calls_text = "".join(c["function"]["name"] + c["function"]["arguments"] for c in wire.get("tool_calls") or [])  # type: ignore[index,union-attr]
    text = str(wire.get("content") or "") + calls_text
    return len(select_tokenizer(model=MODEL)["tokenizer"].encode(text).ids)


def test_deepseek_is_counted_with_its_own_tokenizer_offline() -> None:
    assert tokenizer_info(MODEL) == TokenizerInfo(
        model=MODEL, tokenizer="deepseek (HuggingFace, bundled with LiteLLM)", exact=True
    )
    assert token_counter_for(MODEL).info.exact


def test_a_model_without_its_own_tokenizer_falls_back_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="agent_runtime.engine.conversation.tokens"):
        counter = LiteLLMTokenCounter("demo/agent")
    assert counter.info == TokenizerInfo(model="demo/agent", tokenizer="tiktoken", exact=False)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "LiteLLM has no tokenizer of demo/agent's own: the chat memory counts its tokens with tiktoken, "
            "an approximation",
        )
    ]
    assert tokenizer_info("openai/gpt-4o-mini").exact, "tiktoken is OpenAI's own"


def test_per_message_counts_add_up_to_the_whole_window_and_overcount_only_the_framing() -> None:
    counter = token_counter_for(MODEL)
    per_message = [counter(m) for m in CONVERSATION]
    whole = load_litellm().token_counter(model=MODEL, messages=[to_wire(m) for m in CONVERSATION])
    # The reply priming (3 tokens) is counted once for a list, and taken off each single message.
    assert sum(per_message) + 3 == whole
    framing = [count - _content_tokens(m) for count, m in zip(per_message, CONVERSATION, strict=True)]
    # Measured: 4-5 per text message, 4 per tool call, 8 per tool result (its call id included). DeepSeek's
    # template spends one token per message, so the overcount is at most 7 a message, and never negative.
    assert framing == [4, 4, 5, 4, 8]
    assert counter(calls("c2", "k1")) == per_message[3], "same wire form, same count (cached by content)"
    assert token_counter_for(MODEL) is counter


def test_default_policy_counts_with_litellm() -> None:
    long_answer = reply("a1", "lorem ipsum dolor sit amet " * 200)
    conversation: list[ChatMessage] = [user("u1"), long_answer, user("u2"), reply("a2", "short")]
    counter = token_counter_for(MODEL)
    budget = counter(conversation[2]) + counter(conversation[3]) + counter(conversation[0])
    outcome = apply_window(conversation, WindowPolicy(max_tokens=budget, model=MODEL))
    assert ids(outcome.messages) == ["u2", "a2"]
    assert outcome.token_count == counter(conversation[2]) + counter(conversation[3])
