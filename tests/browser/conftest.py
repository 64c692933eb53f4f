"""A live `serve` for the browser tests, its model the DeepSeek stub answering as the offline demo model does
(deterministic tool calls and approvals), except "slow:" turns, streamed slowly enough to reload or cancel
mid-answer. Chromium is Debian's (.ci/run installs it); the Node packages come from package-lock.json."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

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


class NodeScript:
    """A Node script of this folder given one JSON request on stdin, its stdout read line by line while it runs (a
    line per event as it arrives, say), its last line its result."""

    def __init__(self, script: str, proc: asyncio.subprocess.Process) -> None:
        self.script, self.proc = script, proc
        self.lines: list[str] = []
        assert proc.stderr is not None
        self._stderr = asyncio.create_task(proc.stderr.read())

    @classmethod
    async def start(cls, script: str, request: dict[str, Any]) -> Self:
        proc = await asyncio.create_subprocess_exec(
            "node",
            str(HERE / script),
            cwd=HERE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # Tests reach no internet: CopilotKit's runtime would try to send its telemetry.
            env={**os.environ, "COPILOTKIT_TELEMETRY_DISABLED": "true"},
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request).encode())
        await proc.stdin.drain()
        proc.stdin.close()
        return cls(script, proc)

    async def next_line(self, *, within: float) -> str:
        """The next line it prints; an AssertionError if none comes in time or it ended."""
        assert self.proc.stdout is not None
        try:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), within)).decode(errors="replace")
        except TimeoutError:
            raise AssertionError(f"{self.script} printed nothing in {within} s after {self.lines[-3:]}") from None
        assert line, f"{self.script} ended after {self.lines[-3:]}"
        self.lines.append(line.rstrip("\n"))
        return self.lines[-1]

    async def result(self, *, within: float) -> dict[str, Any]:
        """Its last line, once it exited 0."""
        assert self.proc.stdout is not None
        try:
            out = await asyncio.wait_for(self.proc.stdout.read(), within)
            await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"{self.script} did not finish in {within} s") from None
        self.lines.extend(out.decode(errors="replace").splitlines())
        stdout, stderr = "\n".join(self.lines), (await self._stderr).decode(errors="replace")
        code = self.proc.returncode
        assert code == 0, f"{self.script} exited {code}:\n{stdout[-2000:]}\n{stderr[-4000:]}"
        # The last line: libraries may log to stdout before it.
        result: dict[str, Any] = json.loads(stdout.strip().rsplit("\n", 1)[-1])
        return result


async def run_node(script: str, request: dict[str, Any], *, within: float) -> dict[str, Any]:
    return await (await NodeScript.start(script, request)).result(within=within)


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
