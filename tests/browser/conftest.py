"""A live `serve` for the browser tests, its model the DeepSeek stub answering as the offline demo model does
(deterministic tool calls and approvals), except "slow:" turns, streamed slowly enough to reload or cancel
mid-answer. Chromium is Debian's (.ci/run installs it); the Node packages come from package-lock.json."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from tests.runs.conftest import intent_direct, stage_request_text
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubReply, StubToolCall
from tests.support.npm import npm_ci
from tests.support.serve import ServeProcess, start_serve

from agent_runtime.engine.llm.demo.stages import demo_answer
from agent_runtime.engine.llm.models import ToolSchema, WireMessage

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHROMIUM = "/usr/bin/chromium"
INSTALL = "apt-get install -y chromium"
STUB_API_KEY = "sk-browser-stub"
SLOW = "slow:"
STORY = "Once upon a time a kayaker paddled north along the coast, past islands and fjords, " * 3 + "The end."

_MESSAGES = TypeAdapter(list[WireMessage])
_TOOLS = TypeAdapter(list[ToolSchema])


def respond(request: RecordedRequest) -> StubReply:
    if stage_request_text(request).startswith(SLOW):
        # ~5 s of streaming: time for a reload or a cancel while it runs (either takes about a second).
        return intent_direct(STORY, chunk_chars=4, chunk_delay_seconds=0.08)
    fields = request.fields
    tools = _TOOLS.validate_python(fields.get("tools") or []) if fields.get("tool_choice") != "none" else []
    json_mode = (fields.get("response_format") or {}).get("type") == "json_object"
    answer = demo_answer(_MESSAGES.validate_python(request.messages), tools, json_mode)
    return StubReply(
        content=answer.content,
        reasoning_content=(answer.reasoning or None) if request.thinking_enabled else None,
        tool_calls=[
            StubToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments) for c in answer.tool_calls
        ],
    )


def _thinking_intent(directory: Path) -> Path:
    """The shipped agents and tasks, with thinking on in the intent stage: the page shows reasoning, and the shipped
    tasks all think not (config/crewai/tasks.yaml says why)."""
    shutil.copytree(ROOT / "config" / "crewai", directory)
    tasks = directory / "tasks.yaml"
    text = tasks.read_text()
    assert text.count("thinking: disabled") >= 1, "the intent task's thinking line moved"
    tasks.write_text(text.replace("thinking: disabled", "thinking: enabled", 1))
    return directory


def chromium_or_skip() -> str:
    """The system's Chromium. CI must have it (.ci/run installs it): there a missing one fails the tests."""
    found = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if found is not None:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"chromium is not installed (CI is set): .ci/run installs it with `{INSTALL}`")
    pytest.skip(f"chromium is not installed; install it with `sudo {INSTALL}` (Debian/Ubuntu) to run the browser tests")


@dataclass
class Live:
    server: ServeProcess
    stub: DeepSeekStub


@pytest.fixture(scope="session")
def chromium() -> str:
    path = chromium_or_skip()
    npm_ci(HERE, needed_for="the browser tests (playwright-core, @copilotkit/runtime)")
    return path


@pytest.fixture(scope="session")
async def live(database_url: str, chromium: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Live]:
    workdir = tmp_path_factory.mktemp("browser")
    async with DeepSeekStub(api_key=STUB_API_KEY, responder=respond) as stub:
        env = {
            "LLM_MODEL": "deepseek/deepseek-flash",
            "LLM_API_BASE": stub.base_url,
            "DEEPSEEK_API_KEY": STUB_API_KEY,
            "CREWAI_CONFIG_DIR": str(_thinking_intent(workdir / "crewai")),
        }
        server = await start_serve("playground", database_url=database_url, workdir=workdir, env=env)
        try:
            yield Live(server=server, stub=stub)
            await server.stop()
        finally:
            await server.close()
