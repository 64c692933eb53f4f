"""GET /v1/agui/capabilities: what this server does, in AG-UI 1.0's AgentCapabilities shape, derived from the
running configuration: a feature turned off (or not configured) is not declared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ag_ui.core as agui
import pytest
from tests.conftest import User
from tests.runs.conftest import STAGES, THINKING, MakeHarness, crewai_config, intent_needs, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall

CONFETTI = {"name": "show_confetti", "description": "Celebrate.", "parameters": {"type": "object", "properties": {}}}


async def _capabilities(h: Any, user: User) -> dict[str, Any]:
    response = await h.client.get("/v1/agui/capabilities", headers=user.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    agui.AgentCapabilities.model_validate(body)  # the spec's shape, camelCase on the wire
    return body


async def test_the_capabilities_say_what_the_shipped_configuration_does(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness() as h:
        user = make_user()
        unauthenticated = await h.client.get("/v1/agui/capabilities")
        assert unauthenticated.status_code == 401

        body = await _capabilities(h, user)

    assert [t["name"] for t in body["tools"]["items"]] == ["current_time", "calculator", "update_bio", "forget_memory"]
    assert body["tools"]["supported"] is True and body["tools"]["clientProvided"] is True
    assert body["transport"] == {
        "streaming": True,
        "websocket": False,
        "httpBinary": False,
        "pushNotifications": False,
        "resumable": True,
    }
    # The suite's settings turn long-term memories off (tests/conftest.py); the next test turns them on.
    assert body["state"] == {"snapshots": True, "deltas": True, "memory": False, "persistentState": True}
    # Every shipped task has thinking off and the model is a provider's: no reasoning is streamed.
    assert body["reasoning"] == {"supported": False, "streaming": False, "encrypted": False}
    assert body["humanInTheLoop"]["approvals"] is True and body["humanInTheLoop"]["interrupts"] is True
    # deepseek-flash answers every stage, and DeepSeek's vision guide lists it (LLM_IMAGE_MODELS' default).
    assert body["multimodal"]["input"] == {"image": True, "audio": False, "video": False, "pdf": False, "file": False}
    assert body["execution"] == {"codeExecution": False, "maxExecutionTime": 120_000}
    assert body["custom"]["cancel"]["supported"] is True
    assert body["custom"]["resumableStreams"]["header"] == "Last-Event-ID"


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"llm_model": None, "deepseek_api_key": None, "user_memories_enabled": True}, id="demo-model"),
        pytest.param({"user_memories_enabled": True}, id="deepseek-flash"),
        pytest.param({"llm_image_models": "openai/gpt-4o"}, id="no-image-model"),
        pytest.param({"max_images_per_message": 0}, id="no-images-allowed"),
    ],
)
async def test_image_input_and_memory_follow_the_configuration(
    make_harness: MakeHarness, make_user: Callable[[], User], overrides: dict[str, Any]
) -> None:
    user = make_user()
    async with make_harness(**overrides) as h:
        body = await _capabilities(h, user)
        settings = h.settings
        stage_models = {h.engine.templates.call_options(stage, settings).model for stage in STAGES}
        image_models = {"demo/agent", *settings.llm_image_models.split(",")}
        images = settings.max_images_per_message > 0 and stage_models <= image_models
        assert body["multimodal"]["input"]["image"] is images
        assert body["state"]["memory"] is settings.user_memories_enabled

        # And a run does what the capabilities say about images: taken, or a 422 naming the model or the limit.
        response = await h.client.post(
            f"/v1/sessions/{await h.new_session(user)}/runs",
            json={"message": "what is this?", "images": [{"url": "https://example.com/cat.png"}]},
            headers=user.headers,
        )
        assert (response.status_code == 200) is images, response.text


async def test_features_turned_off_disappear_and_features_turned_on_appear(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    user = make_user()
    async with make_harness(
        agui_frontend_tools=False, crewai_config_dir=crewai_config(tmp_path, execution=THINKING)
    ) as h:
        body = await _capabilities(h, user)
        assert body["tools"]["clientProvided"] is False
        assert body["reasoning"] == {"supported": True, "streaming": True, "encrypted": False}

        # And the run does what the capabilities say: the client's tool is not offered to the model.
        sid = await h.new_session(user)
        h.stub.enqueue(
            intent_needs("Celebrate."),
            StubReply(tool_calls=[StubToolCall(id="c1", name="calculator", arguments='{"expression": "1+1"}')]),
        )
        run = await h.agui(
            user,
            {
                "threadId": sid,
                "runId": "r",
                "messages": [{"id": "u", "role": "user", "content": "hi"}],
                "tools": [CONFETTI],
            },
        )
        assert types(run.events)[0] == "RUN_STARTED", run.body
        execution = h.stub.requests[1]
        assert "show_confetti" not in [t["function"]["name"] for t in execution.body["tools"]]
