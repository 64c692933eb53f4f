"""OpenTelemetry traces: off unless `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_TRACES_EXPORTER` is set.

`configure_tracing` (called once per process by `serve`) installs the SDK's tracer provider as the global
one; until then every `tracer` span below is OpenTelemetry's no-op span, so the instrumented code costs
next to nothing with tracing off. The tree of a run: the HTTP request span (FastAPI's own telemetry,
named after the route template) > `invoke_agent run` > one `stage <name>` per flow stage > `chat <model>`
per model call (GenAI semantic conventions) and `execute_tool <name>` per tool call; SQL statements are
spans under whatever is current when they run.

CrewAI's own telemetry stays off through `CREWAI_DISABLE_TELEMETRY` (engine/flow/crewai/env.py), not
through `OTEL_SDK_DISABLED`, which would also turn this SDK into a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agent_runtime.settings import Settings

tracer = trace.get_tracer("agent_runtime")

# Attribute names of our own (no semantic convention covers them).
COST_ATTRIBUTE = "agent_runtime.cost_cny"
# On a model call's span when a fallback answered it: the model that was asked first.
FALLBACK_FROM_ATTRIBUTE = "agent_runtime.fallback_from"
RUN_ID_ATTRIBUTE = "agent_runtime.run_id"
SESSION_ID_ATTRIBUTE = "agent_runtime.session_id"
ERROR_ID_ATTRIBUTE = "agent_runtime.error_id"
STAGE_ATTRIBUTE = "agent_runtime.stage"
# A statement is named by its first keyword; its text is kept up to this length (never its parameters).
_MAX_STATEMENT_CHARS = 2000


def _exporter(settings: Settings) -> SpanExporter | None:
    name = settings.otel_traces_exporter or ("otlp" if settings.otel_exporter_otlp_endpoint else None)
    if name is None or name == "none":
        return None
    if name == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    base = settings.otel_exporter_otlp_endpoint
    # As the specification says for the all-signals variable: the traces path is appended to it.
    return OTLPSpanExporter(endpoint=f"{base.rstrip('/')}/v1/traces" if base else None)


def configure_tracing(settings: Settings) -> TracerProvider | None:
    """Install the SDK tracer provider when the environment asks for traces; None when it does not."""
    exporter = _exporter(settings)
    if exporter is None:
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": settings.otel_service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def flush_tracing() -> None:
    """Export the spans still queued (the SDK provider does this at interpreter exit, which a worker skips)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


def tracing_enabled() -> bool:
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def annotate_current(**attributes: str) -> None:
    """Put ids on the current span (the HTTP request's, in the middleware)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({f"agent_runtime.{key}": value for key, value in attributes.items()})


def mark_failed(span: Span, code: str, *, error_id: str | None = None) -> None:
    span.set_status(Status(StatusCode.ERROR, code))
    span.set_attribute("error.type", code)
    if error_id is not None:
        span.set_attribute(ERROR_ID_ATTRIBUTE, error_id)


@contextmanager
def stage_span(stage: str) -> Iterator[Span]:
    with tracer.start_as_current_span(f"stage {stage}", attributes={STAGE_ATTRIBUTE: stage}) as span:
        yield span


@contextmanager
def model_call_span(model: str, *, streaming: bool) -> Iterator[Span]:
    """A GenAI client span: https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/"""
    provider = model.split("/", 1)[0] if "/" in model else model
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "agent_runtime.streaming": streaming,
    }
    with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


@contextmanager
def tool_span(tool: str) -> Iterator[Span]:
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    with tracer.start_as_current_span(f"execute_tool {tool}", kind=SpanKind.INTERNAL, attributes=attributes) as span:
        yield span


def _record_query(query: asyncpg.connection.LoggedQuery) -> None:
    # asyncpg calls query loggers after the statement, via loop.call_soon, in a copy of the caller's context:
    # the current span is the one that ran the statement, so the SQL span is its child, back-dated.
    end = time.time_ns()
    text = query.query.strip()
    operation = text.split(None, 1)[0].upper() if text else "SQL"
    span = tracer.start_span(
        f"{operation} postgresql",
        kind=SpanKind.CLIENT,
        start_time=end - int(query.elapsed * 1e9),
        attributes={
            "db.system.name": "postgresql",
            "db.operation.name": operation,
            "db.query.text": text[:_MAX_STATEMENT_CHARS],
        },
    )
    if query.exception is not None:
        span.set_status(Status(StatusCode.ERROR, type(query.exception).__name__))
        span.set_attribute("error.type", type(query.exception).__name__)
    span.end(end_time=end)


def trace_queries(conn: asyncpg.Connection) -> None:
    """A span per SQL statement on this connection, when tracing is on (asyncpg has no hook cheaper than this
    per-connection logger, and it adds a timing wrapper to every statement: so only with tracing on)."""
    if tracing_enabled():
        conn.add_query_logger(_record_query)
