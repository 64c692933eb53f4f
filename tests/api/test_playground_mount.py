"""/playground serves the committed build (scripts/playground/ -> src/agent_runtime/playground/static/) from the
package, offline; PLAYGROUND_ENABLED turns it off, and production has it off unless set."""

from __future__ import annotations

import re

import httpx
import pytest

from agent_runtime.api.app import create_app
from agent_runtime.settings import Settings


@pytest.mark.parametrize(
    ("environment", "enabled", "on"),
    [
        ("development", None, True),
        ("test", None, True),
        ("production", None, False),
        ("production", True, True),
        ("development", False, False),
    ],
)
def test_the_playground_is_on_except_in_production(
    settings: Settings, environment: str, enabled: bool | None, on: bool
) -> None:
    assert settings.model_copy(update={"environment": environment, "playground_enabled": enabled}).playground_on is on


async def test_the_page_and_its_assets_come_from_the_package(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"playground_enabled": True}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        bare = await client.get("/playground")
        assert bare.status_code in (307, 308) and bare.headers["location"].endswith("/playground/"), bare
        page = await client.get("/playground/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
        assert assets and all(a.startswith("./assets/") for a in assets), assets  # same origin, no CDN
        for asset in assets:
            response = await client.get(f"/playground/{asset.removeprefix('./')}")
            assert response.status_code == 200, asset
        assert "/playground/" not in (await client.get("/openapi.json")).json()["paths"]


async def test_playground_enabled_false_leaves_it_out(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"playground_enabled": False}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert (await client.get("/playground/")).status_code == 404
