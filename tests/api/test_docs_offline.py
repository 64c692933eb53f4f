"""/docs and /redoc work offline: their scripts and styles come from the service, never a CDN."""

from __future__ import annotations

import re

import httpx
import pytest


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_load_their_assets_from_the_service(client: httpx.AsyncClient, page: str) -> None:
    html = await client.get(page)
    assert html.status_code == 200
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
    scripts = [a for a in assets if a.endswith((".js", ".css"))]
    assert scripts, html.text
    for asset in scripts:
        assert asset.startswith("/"), f"{page} loads {asset} from another host"
        response = await client.get(asset)
        assert response.status_code == 200, asset
        assert len(response.content) > 10_000, asset  # the real bundle, not a stub
    assert "cdn" not in html.text.lower()


async def test_openapi_and_metrics_are_public(client: httpx.AsyncClient) -> None:
    assert (await client.get("/openapi.json")).status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert "agent_runtime_http_requests_total" in metrics.text
    assert "/metrics" not in (await client.get("/openapi.json")).json()["paths"]
