"""METRICS_PORT moves /metrics to a listener of its own; METRICS_ENABLED=false turns it off. Traces' exporter
comes from the standard OTEL_* variables."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from tests.support.serve import free_port

from agent_runtime.api.app import create_app
from agent_runtime.observability.tracing import _exporter
from agent_runtime.settings import Settings


async def test_metrics_on_their_own_port(settings: Settings) -> None:
    port = free_port()
    app = create_app(settings.model_copy(update={"metrics_port": port}))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            assert (await client.get("/metrics")).status_code == 404
        async with httpx.AsyncClient(timeout=10) as client:
            own = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert own.status_code == 200
        assert "agent_runtime_db_pool_max_connections" in own.text
    with pytest.raises(httpx.ConnectError):  # stopped with the app
        async with httpx.AsyncClient(timeout=2) as client:
            await client.get(f"http://127.0.0.1:{port}/metrics")


async def test_metrics_can_be_turned_off(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"metrics_enabled": False}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert (await client.get("/metrics")).status_code == 404


def test_trace_exporter_from_the_otel_variables(settings: Settings) -> None:
    def exporter(**values: str | None) -> object:
        return _exporter(settings.model_copy(update=values))

    assert exporter() is None  # off unless asked
    assert exporter(otel_traces_exporter="none", otel_exporter_otlp_endpoint="http://collector:4318") is None
    assert isinstance(exporter(otel_traces_exporter="console"), ConsoleSpanExporter)
    otlp = exporter(otel_exporter_otlp_endpoint="http://collector:4318/")
    assert isinstance(otlp, OTLPSpanExporter)
    assert otlp._endpoint == "http://collector:4318/v1/traces"
