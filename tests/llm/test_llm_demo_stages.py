"""The demo model's text heuristics, on their own."""

from __future__ import annotations

import pytest

from agent_runtime.engine.llm import WireMessage
from agent_runtime.engine.llm.demo.stages import asks_for_time, detect_stage, find_expression, user_request


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("what is 12 * (3 + 4)?", "12 * (3 + 4)"),
        ("2+3", "2+3"),
        ("算一下 7×8 吧", "7*8"),
        ("100 ÷ 4 =", "100 / 4"),
        ("2^10", "2**10"),
        ("(1 + 2) * 3", "(1 + 2) * 3"),
        ("I have 3 cats", None),
        ("room 101", None),
        ("", None),
    ],
)
def test_find_expression(text: str, expression: str | None) -> None:
    assert find_expression(text) == expression


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What time is it?", True),
        ("what's the DATE", True),
        ("现在几点", True),
        ("今天日期", True),
        ("时间过得真快", True),
        ("sometimes I wonder", False),
        ("update my timezone", False),
        ("hello", False),
    ],
)
def test_asks_for_time(text: str, expected: bool) -> None:
    assert asks_for_time(text) is expected


def test_user_request_prefers_the_quoted_latest_message() -> None:
    task = (
        'What the user wants (a JSON string): "x"\n'
        'The user\'s latest message (a JSON string): "hi \\"you\\""\n{"title":"IntentResult"}'
    )
    assert user_request([WireMessage(role="user", content="old"), WireMessage(role="user", content=task)]) == 'hi "you"'


def test_user_request_cuts_the_schema_out_of_a_wrapped_request() -> None:
    wrapped = 'what is 2+3\n\nSchema: {"title":"IntentResult","properties":{"n":{"maximum":5-1}}}'
    assert user_request([WireMessage(role="user", content=wrapped)]).strip() == "what is 2+3\n\nSchema:"


def test_user_request_is_the_last_user_turn_wherever_it_sits() -> None:
    messages = [
        WireMessage(role="user", content="first"),
        WireMessage(role="user", content="latest"),
        WireMessage(role="system", content='{"title":"IntentResult"}'),
        WireMessage(role="assistant", content="..."),
    ]
    assert user_request(messages) == "latest"
    assert user_request([WireMessage(role="system", content="nothing")]) == ""


def test_detect_stage_prefers_schema_titles_then_the_latest_mention() -> None:
    assert detect_stage([WireMessage(role="user", content='{"title": "ExecutionResult"} then IntentResult')]) == (
        "ExecutionResult"
    )
    prose = "Here is the ExecutionResult; now write the OrganizationResult."
    assert detect_stage([WireMessage(role="user", content=prose)]) == "OrganizationResult"
    assert detect_stage([WireMessage(role="user", content="hello")]) is None


def test_demo_model_summarises_the_conversation_deterministically() -> None:
    """The memory's summary task (schema title ConversationSummary) gets an extractive answer: the previous summary
    carried forward, then the sentences in which the user stated something about themselves (questions and
    requests left out), so the summary works offline and the same conversation always gives the same text."""
    from agent_runtime.engine.flow.template_files import load_flow_templates
    from agent_runtime.engine.llm.demo.stages import demo_answer
    from agent_runtime.resources import default_config_dir

    task = load_flow_templates(default_config_dir() / "crewai").render_summary_task(150)
    messages = [
        WireMessage(role="system", content="policy"),
        WireMessage(role="user", content="我叫阿芽"),
        WireMessage(role="assistant", content="你好，阿芽！"),
        WireMessage(role="user", content="What is 6*7?"),
        WireMessage(role="assistant", content="42."),
        WireMessage(role="user", content=task),
    ]
    answer = demo_answer(messages, [], json_mode=True)
    assert answer.content == '{"summary": "我叫阿芽"}'
    assert demo_answer(messages, [], json_mode=True) == answer

    from agent_runtime.engine.conversation.summary import summary_message

    previous = summary_message("My sister is called Alma.", "start").content
    later = [
        WireMessage(role="system", content="policy"),
        WireMessage(role="user", content=previous + "\n\nI live in Lofoten. Could you suggest a kayak? My dog is Rex."),
        WireMessage(role="assistant", content="Sure."),
        WireMessage(role="user", content="Please tell me my budget is fine? What about my plan?"),
        WireMessage(role="user", content=task),
    ]
    carried = demo_answer(later, [], json_mode=True)
    assert carried.content == '{"summary": "My sister is called Alma. I live in Lofoten. My dog is Rex."}'


def test_the_demo_summary_reads_the_markers_the_memory_writes() -> None:
    from agent_runtime.engine.conversation import summary
    from agent_runtime.engine.llm.demo import extractive

    assert (extractive.SUMMARY_BLOCK_START, extractive.SUMMARY_BLOCK_END) == (
        summary.SUMMARY_BLOCK_START,
        summary.SUMMARY_BLOCK_END,
    )
