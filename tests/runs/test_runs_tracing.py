"""Traces of a tool run: the span tree, GenAI attributes, ids on spans and trace ids on log lines.

The OpenTelemetry SDK allows one global tracer provider per process, so this module installs one whose
processor records spans only while a test captures them (the rest of the suite pays no memory for it).
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.conftest import User
from tests.runs.conftest import (
    MODEL,
    Harness,
    MakeHarness,
    execution_done,
    intent_needs,
    organized,
    types,
    usage,
    warm_up,
)
from tests.stubs.deepseek_stub import StubReply, StubToolCall

from agent_runtime.logging_setup import JsonFormatter
from agent_runtime.observability.tracing import tracing_enabled


class _Capture(SpanProcessor):
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.active = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            self.exporter.export([span])


_CAPTURE = _Capture()


@pytest.fixture
async def h(make_harness: MakeHarness) -> AsyncIterator[Harness]:
    # The first run of a process imports CrewAI (~10 s of CPU): on a busy machine more than the harness's 30 s.
    async with make_harness(run_timeout_seconds=180) as harness:
        yield harness


@pytest.fixture(scope="module", autouse=True)
def _tracer_provider() -> None:
    """Installed before any app of this module is built: pools trace SQL only when tracing was on as they
    opened their connections."""
    if not tracing_enabled():
        provider = TracerProvider()
        provider.add_span_processor(_CAPTURE)
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    assert tracing_enabled()
    _CAPTURE.exporter.clear()
    _CAPTURE.active = True
    try:
        yield _CAPTURE.exporter
    finally:
        _CAPTURE.active = False
        _CAPTURE.exporter.clear()


def _tree(spans: list[ReadableSpan], root: ReadableSpan, *, sql: bool = False) -> dict[str, Any]:
    """`{name: [children...]}` below `root`, children in start order; SQL spans left out unless asked."""
    children = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id),
        key=lambda s: s.start_time or 0,
    )
    kept = [c for c in children if sql or c.attributes.get("db.system.name") is None]
    return {root.name: [_tree(spans, child, sql=sql) for child in kept]}


async def test_span_tree_of_a_tool_run(h: Harness, make_user: Callable[[], User], spans: InMemorySpanExporter) -> None:
    user = make_user()
    await warm_up(h, user)
    sid = await h.new_session(user)
    h.stub.enqueue(
        intent_needs("Compute 17 + 25 with the calculator.", usage=usage(900, 40, 800)),
        StubReply(
            tool_calls=[StubToolCall(id="call_1", name="calculator", arguments='{"expression": "17 + 25"}')],
            usage=usage(1200, 20, 900),
        ),
        execution_done("17 + 25 = 42", {"result": "42"}, usage=usage(1300, 60, 1200)),
        organized("17 + 25 is 42.", usage=usage(1100, 30, 1000)),
    )
    spans.clear()
    log_lines = io.StringIO()
    handler = logging.StreamHandler(log_lines)
    handler.setFormatter(JsonFormatter())
    service_log = logging.getLogger("agent_runtime")
    service_log.addHandler(handler)
    level = service_log.level
    service_log.setLevel(logging.INFO)
    try:
        result = await h.run(user, sid, "What is 17 + 25?", message_id="m-1")
    finally:
        service_log.removeHandler(handler)
        service_log.setLevel(level)
    assert types(result.events)[-1] == "RUN_FINISHED"

    finished = list(spans.get_finished_spans())
    (request,) = [s for s in finished if s.name == "POST /v1/sessions/{session_id}/runs"]
    chat = f"chat {MODEL}"
    assert _tree(finished, request) == {
        "POST /v1/sessions/{session_id}/runs": [
            {
                "invoke_agent run": [
                    {"stage intent": [{chat: []}]},
                    {"stage execution": [{chat: []}, {"execute_tool calculator": []}, {chat: []}]},
                    {"stage organization": [{chat: []}]},
                ]
            }
        ]
    }
    assert {s.context.trace_id for s in finished if s.context.trace_id == request.context.trace_id} == {
        request.context.trace_id
    }
    request_id = result.headers["x-request-id"]
    assert request.attributes["agent_runtime.request_id"] == request_id
    assert request.attributes["http.route"] == "/v1/sessions/{session_id}/runs"
    (run,) = [s for s in finished if s.name == "invoke_agent run"]
    assert run.attributes["agent_runtime.run_id"] == result.run_id
    assert run.attributes["agent_runtime.session_id"] == sid

    calls = sorted((s for s in finished if s.name == chat), key=lambda s: s.start_time or 0)
    first = dict(calls[0].attributes)
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == MODEL
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (900, 40)
    assert first["gen_ai.usage.cache_read.input_tokens"] == 800
    # At peak, 100 cache misses at 2 CNY/M, 800 hits at 0.04, 40 output tokens at 8: 200 + 32 + 320 millionths.
    assert first["agent_runtime.cost_cny"] == pytest.approx(0.000552)
    assert first["gen_ai.response.model"] == MODEL
    (tool,) = [s for s in finished if s.name == "execute_tool calculator"]
    assert tool.attributes["gen_ai.tool.name"] == "calculator"

    # SQL statements are spans under what ran them: the run's own (storing rows) and the request's.
    sql = [s for s in finished if s.attributes.get("db.system.name") == "postgresql"]
    assert any(s.parent is not None and s.parent.span_id == run.context.span_id for s in sql)
    assert any("INSERT INTO agent_chat_messages" in str(s.attributes["db.query.text"]) for s in sql)
    assert all(s.name == f"{s.attributes['db.operation.name']} postgresql" for s in sql)

    # Log lines carry the trace id, and the run's lines its run id.
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    (started,) = [line for line in lines if line["msg"] == "run started"]
    assert started["trace_id"] == format(run.context.trace_id, "032x")
    assert started["run_id"] == result.run_id
    assert started["request_id"] == request_id


async def test_a_failed_run_span_carries_the_error_id(
    h: Harness, make_user: Callable[[], User], spans: InMemorySpanExporter
) -> None:
    from tests.stubs.deepseek_stub import StubFault

    user = make_user()
    await warm_up(h, user)
    sid = await h.new_session(user)
    h.stub.enqueue(*[StubFault(kind="status", status=500)] * 6)  # the model's three attempts, its fallback's
    spans.clear()

    result = await h.run(user, sid, "hello")

    error = result.events[-1]
    assert error["type"] == "RUN_ERROR"
    (run,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent run"]
    assert run.status.status_code == trace.StatusCode.ERROR
    assert run.attributes["error.type"] == "llm_unavailable"
    assert f"error_id {run.attributes['agent_runtime.error_id']}" in error["message"]


def test_crewai_telemetry_stays_off_and_ours_records(h: Harness) -> None:
    # The harness ran configure_crewai_env: CrewAI's telemetry is off, and nothing disabled the OTel SDK.
    from crewai.telemetry import Telemetry

    assert os.environ.get("OTEL_SDK_DISABLED") is None
    assert os.environ["CREWAI_DISABLE_TELEMETRY"] == "true"
    assert Telemetry._is_telemetry_disabled()
    assert not Telemetry().ready
    span = TracerProvider().get_tracer(__name__).start_span("probe")
    assert span.is_recording()
    span.end()
