"""GET /metrics after a tool run: the run, its model calls, tokens, CNY cost and tool call, with bounded labels."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from decimal import Decimal

import pytest
from tests.conftest import User
from tests.runs.conftest import (
    MODEL,
    Harness,
    MakeHarness,
    cny_cost,
    execution_done,
    intent_needs,
    organized,
    types,
    usage,
    warm_up,
)
from tests.stubs.deepseek_stub import StubFault, StubReply, StubToolCall
from tests.support.metrics import delta, scrape, scrape_text


@pytest.fixture
async def h(make_harness: MakeHarness) -> AsyncIterator[Harness]:
    # The first run of a process imports CrewAI (~10 s of CPU): on a busy machine more than the harness's 30 s.
    async with make_harness(run_timeout_seconds=180) as harness:
        yield harness


async def test_metrics_after_a_tool_run(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    await warm_up(h, user)
    sid = await h.new_session(user)
    calls = [usage(900, 40, 800), usage(1200, 20, 900), usage(1300, 60, 1200), usage(1100, 30, 1000)]
    h.stub.enqueue(
        intent_needs("Compute 17 + 25 with the calculator.", usage=calls[0]),
        StubReply(
            tool_calls=[StubToolCall(id="call_1", name="calculator", arguments='{"expression": "17 + 25"}')],
            usage=calls[1],
        ),
        execution_done("17 + 25 = 42", {"result": "42"}, usage=calls[2]),
        organized("17 + 25 is 42.", usage=calls[3]),
    )
    before = await scrape(h.client)

    result = await h.run(user, sid, "What is 17 + 25?")
    assert types(result.events)[-1] == "RUN_FINISHED"
    scraped = await scrape_text(h.client)
    text, after = scraped.text, scraped.samples

    model = {"model": MODEL}
    assert delta(before, after, "agent_runtime_runs_started_total") == 1
    assert delta(before, after, "agent_runtime_runs_finished_total", outcome="completed", error_code="") == 1
    assert delta(before, after, "agent_runtime_run_duration_seconds_count", outcome="completed") == 1
    assert delta(before, after, "agent_runtime_run_time_to_first_token_seconds_count") == 1
    for stage, count in (("intent", 1), ("execution", 1), ("organization", 1)):
        assert delta(before, after, "agent_runtime_stage_duration_seconds_count", stage=stage) == count
    assert delta(before, after, "agent_runtime_model_calls_total", outcome="ok", **model) == 4
    assert delta(before, after, "agent_runtime_model_call_duration_seconds_count", **model) == 4
    # The answer stages stream (intent and organization): each has a first token.
    assert delta(before, after, "agent_runtime_model_time_to_first_token_seconds_count", **model) == 2
    assert delta(before, after, "agent_runtime_model_tokens_total", type="input", **model) == 4500
    assert delta(before, after, "agent_runtime_model_tokens_total", type="cached_input", **model) == 3900
    assert delta(before, after, "agent_runtime_model_tokens_total", type="output", **model) == 150
    expected_cost = sum((cny_cost(u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens) for u in calls), Decimal(0))
    cost = delta(before, after, "agent_runtime_model_cost_cny_total", **model)
    assert abs(Decimal(str(cost)) - expected_cost) < Decimal("1e-9"), (cost, expected_cost)
    assert delta(before, after, "agent_runtime_tool_calls_total", tool="calculator", outcome="ok") == 1
    assert delta(before, after, "agent_runtime_tool_call_duration_seconds_count", tool="calculator") == 1
    route = {"method": "POST", "route": "/v1/sessions/{session_id}/runs", "status": "200"}
    assert delta(before, after, "agent_runtime_http_requests_total", **route) == 1
    assert ("agent_runtime_db_pool_max_connections", ()) in after

    # Bounded labels: no id of the user, the session or the run is a label value anywhere.
    label_values = set(re.findall(r'="([^"]*)"', text))
    for identifier in (str(user.id), sid, result.run_id):
        assert identifier not in label_values
        assert identifier not in text


async def test_metrics_count_a_failed_run_by_error_code(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    await warm_up(h, user)
    sid = await h.new_session(user)
    # The model's three attempts, then its fallback's (config/models.yaml).
    h.stub.enqueue(*[StubFault(kind="status", status=500)] * 6)
    before = await scrape(h.client)

    result = await h.run(user, sid, "hello")

    assert types(result.events)[-1] == "RUN_ERROR"
    after = await scrape(h.client)
    code = result.events[-1]["code"]
    assert delta(before, after, "agent_runtime_runs_finished_total", outcome="failed", error_code=code) == 1
    assert code == "llm_unavailable"
    assert delta(before, after, "agent_runtime_model_calls_total", model=MODEL, outcome="llm_unavailable") == 1
    assert delta(before, after, "agent_runtime_model_fallbacks_total", model=MODEL, fallback="none") == 1
