"""/playground in a real Chromium against a live `serve`: each case opens its own thread as its own user, types
into CopilotKit's chat and waits for what the page shows (playground.mjs). One browser for all cases (a launch
and a page load each would double the file's time); a failed case's screenshot path is in its failure.

`PLAYGROUND_SCREENSHOT=docs/playground.png` makes the calculator case save the README's screenshot."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from tests.browser.conftest import STORY, Live, run_node

from agent_runtime.engine.auth import mint_token
from agent_runtime.settings import Settings

CASES = ("plain", "calculator", "approve", "deny", "frontend_tool", "reload", "cancel", "stop", "expired")
EXPIRED = (
    "Your token has expired (tokens from `agent-runtime token` last 1 hour unless --ttl says otherwise): "
    "mint a new one and paste it above."
)
DRIVER_TIMEOUT = 240


def docs_screenshot() -> str | None:
    """PLAYGROUND_SCREENSHOT, relative to where pytest runs."""
    path = os.environ.get("PLAYGROUND_SCREENSHOT")
    return os.path.abspath(path) if path else None


class Cases:
    def __init__(self, live: Live, users: dict[str, UUID], tokens: dict[str, str], results: dict[str, Any]) -> None:
        self.live, self.users, self.tokens, self.results = live, users, tokens, results

    def seen(self, name: str) -> dict[str, Any]:
        """What the case saw; fails with its error, screenshot and the server's log when it failed."""
        result: dict[str, Any] = self.results[name]
        assert result["ok"], (
            f"playground case {name!r} failed after {result['ms']} ms:\n{result['error']}\n"
            f"screenshot: {result['screenshot']}\nserver log:\n{self.live.server.log_tail(3000)}"
        )
        return result

    async def get(self, name: str, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"}
        async with httpx.AsyncClient(base_url=self.live.server.base_url, headers=headers, timeout=10) as client:
            response = await client.get(path)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
async def cases(live: Live, chromium: str, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Cases:
    artifacts = tmp_path_factory.mktemp("playground-screenshots")
    users = {name: uuid4() for name in CASES}
    tokens = {name: mint_token(settings, user) for name, user in users.items()}
    tokens["expired"] = mint_token(settings, users["expired"], ttl=timedelta(seconds=-60))
    request = {
        "baseUrl": live.server.base_url,
        "chromium": chromium,
        "artifacts": str(artifacts),
        "screenshot": docs_screenshot(),
        "cases": [{"name": name, "token": tokens[name]} for name in CASES],
    }
    output = await run_node("playground.mjs", request, within=DRIVER_TIMEOUT)
    (artifacts / "results.json").write_text(json.dumps(output, indent=1))
    print(f"playground results and failed cases' screenshots: {artifacts}")
    return Cases(live, users, tokens, output["results"])


async def test_a_plain_turn_streams_the_answer_its_reasoning_and_its_cost(cases: Cases) -> None:
    seen = cases.seen("plain")
    assert "Reading the request" in seen["reasoning"]
    assert seen["cost"].endswith("CNY") and float(seen["cost"].split()[0]) > 0, seen
    assert " in (" in seen["tokens"] and "model calls" in seen["tokens"], seen
    (run,) = (await cases.get("plain", f"/v1/sessions/{seen['threadId']}/runs"))["items"]
    assert run["id"] == seen["runId"] and run["status"] == "completed", run


async def test_a_second_tab_restores_the_thread(cases: Cases) -> None:
    seen = cases.seen("plain")
    assert "hello there" in seen["secondTab"] and "You said" in seen["secondTab"], seen["secondTab"]


async def test_a_server_tool_call_is_shown_with_its_result(cases: Cases) -> None:
    seen = cases.seen("calculator")
    assert "calculator" in seen["tool"] and "84" in seen["tool"], seen["tool"]
    assert "84" in seen["chat"]


async def test_an_approved_bio_update_runs_the_tool(cases: Cases) -> None:
    seen = cases.seen("approve")
    assert "update_bio" in seen["asked"] and "Kayaker from Lofoten" in seen["asked"], seen["asked"]
    assert "denied" not in seen["tool"], seen["tool"]
    assert (await cases.get("approve", "/v1/profile"))["bio"] == "Kayaker from Lofoten"


async def test_a_denied_bio_update_leaves_the_profile_alone(cases: Cases) -> None:
    seen = cases.seen("deny")
    assert "denied by the user" in seen["tool"], seen["tool"]
    assert (await cases.get("deny", "/v1/profile"))["bio"] != "Sailor from Bergen"


async def test_a_frontend_tool_runs_in_the_page_and_the_turn_goes_on(cases: Cases) -> None:
    seen = cases.seen("frontend_tool")
    assert "show_confetti" in seen["confetti"], seen  # the demo model passes the user's words as its message
    runs = (await cases.get("frontend_tool", f"/v1/sessions/{seen['threadId']}/runs"))["items"]
    assert [r["id"] for r in reversed(runs)] == seen["runs"] and {r["status"] for r in runs} == {"completed"}, runs
    messages = (await cases.get("frontend_tool", f"/v1/sessions/{seen['threadId']}/messages"))["items"]
    assert any(m["role"] == "tool" and "shown" in m["content"] for m in messages), messages


async def test_a_reload_mid_run_resumes_the_stream(cases: Cases) -> None:
    seen = cases.seen("reload")
    assert seen["resumedRunId"] == seen["runId"]
    assert STORY in " ".join(seen["chat"].split()), seen["chat"]


async def test_cancel_stops_the_run(cases: Cases) -> None:
    seen = cases.seen("cancel")
    runs = (await cases.get("cancel", f"/v1/sessions/{seen['threadId']}/runs"))["items"]
    assert [(r["id"], r["status"]) for r in runs] == [(seen["runId"], "cancelled")], runs


async def test_the_chats_stop_button_cancels_the_run_on_the_server(cases: Cases) -> None:
    seen = cases.seen("stop")
    runs = (await cases.get("stop", f"/v1/sessions/{seen['threadId']}/runs"))["items"]
    assert [(r["id"], r["status"]) for r in runs] == [(seen["runId"], "cancelled")], runs


async def test_an_expired_token_is_said_to_be_expired(cases: Cases) -> None:
    seen = cases.seen("expired")
    assert seen["status"].startswith(f"{EXPIRED} (It expired at "), seen
    assert seen["status"].endswith(f"agent-runtime token --user {cases.users['expired']})"), seen
    assert seen["error"] == EXPIRED, seen
