"""A long conversation through the run path, with SHORT_WINDOW (a window that cuts within a few turns): the model
sees the cache-aware memory window. The first run over the high-water mark (20 messages) cuts to the low-water mark
(10) at a user turn, summarises what it dropped in one model call (recorded on an audit row), and shows the summary
right after the system prompt; the next run keeps the same start, so its requests begin with exactly the same
bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    INTENT_CONTRACT_LINE,
    SHORT_WINDOW,
    Harness,
    MakeHarness,
    cny_cost,
    intent_direct,
    long_session,
    money,
    types,
    usage,
)
from tests.runs.test_runs_statements import counted_statements
from tests.stubs.deepseek_stub import StubReply

from agent_runtime.engine.conversation.metadata import AuditMetadata
from agent_runtime.engine.conversation.summary import summary_message
from agent_runtime.engine.llm.demo.extractive import NOTHING_STATED

SUMMARY = "The user asked questions 0 to 10; each was answered."


@pytest.fixture
async def h(make_harness: MakeHarness) -> AsyncIterator[Harness]:
    async with make_harness(**SHORT_WINDOW) as harness:
        yield harness


def _turns(first: int, last: int) -> list[dict[str, Any]]:
    return [
        message
        for turn in range(first, last + 1)
        for message in (
            {"role": "user", "content": f"question {turn}{INTENT_CONTRACT_LINE}"},
            {"role": "assistant", "content": f"answer {turn}"},
        )
    ]


async def test_a_cut_summarises_what_it_drops_and_the_next_run_keeps_the_prefix(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await long_session(h, user)
    assert (h.settings.memory_max_messages, h.settings.memory_low_messages) == (20, 10)
    assert h.settings.memory_summary
    h.stub.enqueue(
        StubReply(content=json.dumps({"summary": SUMMARY}), usage=usage(900, 30, 640)), intent_direct("Noted.")
    )

    result = await h.run(user, sid, "question 15")

    assert types(result.events)[-1] == "RUN_FINISHED", result.events[-1]
    summary_call, intent = h.stub.requests
    system = intent.messages[0]
    assert system["role"] == "system"
    # The summary call: the run's system prompt, the dropped turns as they were sent before, then the task.
    assert summary_call.messages[0] == system
    assert summary_call.messages[1:-1] == _turns(0, 10)
    assert "ConversationSummary" in summary_call.messages[-1]["content"]
    assert summary_call.body["response_format"] == {"type": "json_object"}
    # The window: the newest turns that fit 10 messages with the summary (9), the new question included,
    # start at "question 11"; the summary comes right after the system prompt, as data, in one user message
    # with the first kept question (no provider sees two user messages in a row).
    first, *rest = _turns(11, 14)
    summary = summary_message(SUMMARY, "x").content
    assert intent.messages[1] == {"role": "user", "content": f"{summary}\n\n{first['content']}"}
    assert intent.messages[2:-1] == rest

    rows = await h.rows(user, sid)
    summary_rows = [r for r in rows if isinstance(r.metadata, AuditMetadata) and r.metadata.stage == "memory_summary"]
    assert len(summary_rows) == 1 and summary_rows[0].seq < 0
    row = summary_rows[0]
    assert (row.input_tokens, row.output_tokens, row.metadata.cached_tokens) == (900, 30, 640)
    assert money(row.cost) == money(cny_cost(900, 30, 640))
    assert row.metadata.run_id == result.run_id and row.metadata.error is None
    assert result.of_type("CUSTOM")[-1]["value"]["modelCalls"] == 2, "the summary call is part of the run's cost"

    h.stub.enqueue(intent_direct("Noted again."))
    second = await h.run(user, sid, "question 16")

    assert types(second.events)[-1] == "RUN_FINISHED"
    assert len(h.stub.requests) == 3, "no cut, no summary call"
    again = h.stub.requests[2]
    shared = intent.messages[:-1]
    assert again.messages[: len(shared)] == shared, "same start, same summary: the same prefix"
    assert again.messages[len(shared) : -1] == [
        {"role": "user", "content": f"question 15{INTENT_CONTRACT_LINE}"},
        {"role": "assistant", "content": "Noted."},
    ]


async def test_without_summaries_the_cut_keeps_ten_messages(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(**{**SHORT_WINDOW, "memory_summary": False}) as h:
        user = make_user()
        sid = await long_session(h, user)
        h.stub.enqueue(intent_direct("Noted."))

        result = await h.run(user, sid, "question 15")

        assert types(result.events)[-1] == "RUN_FINISHED"
        (request,) = h.stub.requests
        # 10 messages with the new one: "question 11" .. "answer 14" and "question 15" (in the task).
        assert request.messages[1:-1] == _turns(11, 14)


async def test_a_failed_summary_is_recorded_and_retried_at_the_next_run(
    h: Harness, make_user: Callable[[], User]
) -> None:
    user = make_user()
    sid = await long_session(h, user)
    # Not the contract, blank (JSON mode blanks prose), not the contract again: the first try and two repairs.
    bad = [StubReply(content='{"not": "a summary"}'), StubReply(content="a summary in prose"), StubReply(content="{}")]
    h.stub.enqueue(*bad, intent_direct("Noted."))

    result = await h.run(user, sid, "question 15")

    assert types(result.events)[-1] == "RUN_FINISHED", "the run answers without a summary"
    first, _, repair, intent = h.stub.requests
    assert repair.messages[: len(first.messages)] == first.messages
    assert repair.messages[-1]["content"] == (
        "Your previous answer could not be used: it was blank. Answer again with only the ConversationSummary "
        "JSON object (the schema titled ConversationSummary in the task above)."
    )
    assert intent.messages[1:-1] == _turns(11, 14)
    rows = await h.rows(user, sid)
    failed = [r for r in rows if isinstance(r.metadata, AuditMetadata) and r.metadata.stage == "memory_summary"]
    assert [r.metadata.error is not None for r in failed] == [True] * 3, "billed and kept, with their errors"
    assert [r.content for r in failed] == ['{"not": "a summary"}', " " * len("a summary in prose"), "{}"]

    h.stub.enqueue(StubReply(content=json.dumps({"summary": SUMMARY})), intent_direct("Noted again."))
    await h.run(user, sid, "question 16")

    retried, intent = h.stub.requests[4:]
    # The cut was not stored, so this run cuts again (one turn later now) and summarises from the beginning.
    assert retried.messages[1:-1] == _turns(0, 11)
    # The summary and the first kept question in one user message (never two user messages in a row).
    assert (
        intent.messages[1]["content"] == f"{summary_message(SUMMARY, 'x').content}\n\nquestion 12{INTENT_CONTRACT_LINE}"
    )
    assert intent.messages[2:-1] == [*_turns(12, 15)[1:-1], {"role": "assistant", "content": "Noted."}]


async def test_a_cut_costs_two_statements_more_and_the_next_run_none(
    make_harness: MakeHarness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window (mark and summary included) is one statement; a cut adds the read of what it drops and the
    write of the new mark; the summary's audit row goes in the run's last statement. (Budgets off: whether the
    summary call and the turn's first call together outgrow the run's first hold is the tokenizer's business.)"""
    async with make_harness(**SHORT_WINDOW, user_daily_budget_cny=0, user_monthly_budget_cny=0) as h:
        await _cut_statements(h, make_user, monkeypatch)


async def _cut_statements(h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch) -> None:
    user = make_user()
    sid = await long_session(h, user)
    h.stub.enqueue(StubReply(content=json.dumps({"summary": SUMMARY})), intent_direct("Noted."))
    await h.engine.runs.wait_idle()
    with counted_statements(monkeypatch, sid) as cut:
        result = await h.run(user, sid, "question 15")
        await h.engine.runs.wait_idle()  # the event log's one write, after the stream ends
    assert types(result.events)[-1] == "RUN_FINISHED"
    kinds = [kind.split(" ")[0] for kind in cut]
    assert kinds == ["start", "snapshot", "window", "SELECT", "INSERT", "finish", "events"]
    assert "agent_memory_windows" in cut[4]

    h.stub.enqueue(intent_direct("Noted again."))
    with counted_statements(monkeypatch, sid) as kept:
        await h.run(user, sid, "question 16")
        await h.engine.runs.wait_idle()
    assert kept == ["start", "snapshot", "window", "finish", "events"]


async def test_the_demo_model_summarises_offline(make_harness: MakeHarness, make_user: Callable[[], User]) -> None:
    """Summaries are on by default, and with no provider configured the offline demo model writes a deterministic,
    extractive one, through the same path (LiteLLM custom provider, JSON mode, audit row)."""
    async with make_harness(llm_model=None, llm_api_base=None, deepseek_api_key=None, run_timeout_seconds=120) as h:
        assert h.settings.memory_summary
    async with make_harness(
        llm_model=None,
        llm_api_base=None,
        deepseek_api_key=None,
        run_timeout_seconds=120,
        **SHORT_WINDOW,
    ) as h:
        user = make_user()
        sid = await long_session(h, user)

        result = await h.run(user, sid, "question 15")

        assert types(result.events)[-1] == "RUN_FINISHED", result.events[-1]
        rows = await h.rows(user, sid)
        (summary,) = [r for r in rows if isinstance(r.metadata, AuditMetadata) and r.metadata.stage == "memory_summary"]
        # "question N" states nothing about the user.
        assert summary.content == json.dumps({"summary": NOTHING_STATED})
        assert h.stub.requests == [], "nothing left the process"
