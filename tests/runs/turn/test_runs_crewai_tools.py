"""CrewAI's tool ecosystem plugs in: a `crewai.tools.BaseTool` subclass, registered beside our tools and granted in
agents.yaml, is offered to the execution stage and run by it (sync ones on a worker thread, async ones on the loop),
through the whole service."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field
from tests.conftest import User
from tests.runs.conftest import MakeHarness, crewai_config, execution_done, intent_needs, organized, types
from tests.stubs.deepseek_stub import StubReply, StubToolCall

from agent_runtime.engine.flow.turn import load_agent

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-tools-{os.getpid()}"
load_agent(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

from crewai.tools import BaseTool, ToolFailure  # noqa: E402

from agent_runtime.engine.flow.crewai.tools import CrewAITool  # noqa: E402


class WordsArgs(BaseModel):
    text: str = Field(description="The text whose words to count.")


class WordCountTool(BaseTool):
    """A synchronous CrewAI tool, the common kind: it blocks, so it runs on a worker thread."""

    name: str = "Word Counter"
    description: str = "Count the words of a text."
    args_schema: type[BaseModel] = WordsArgs
    ran_on: list[int] = Field(default_factory=list)

    def _run(self, text: str) -> str:
        self.ran_on.append(threading.get_ident())
        if not text.strip():
            return ToolFailure(message="no words to count")  # type: ignore[return-value]
        return f"{len(text.split())} words"


class ShoutTool(BaseTool):
    """An async CrewAI tool: awaited on the app's loop."""

    name: str = "shout"
    description: str = "Upper-case a text."
    args_schema: type[BaseModel] = WordsArgs
    ran_on: list[asyncio.AbstractEventLoop] = Field(default_factory=list)

    def _run(self, text: str) -> str:
        raise AssertionError("the async tool must be awaited, not run")

    async def _arun(self, text: str) -> str:
        self.ran_on.append(asyncio.get_running_loop())
        return text.upper()


def _granting(tmp_path: Path, *names: str) -> Path:
    config = crewai_config(tmp_path)
    agents_file = config / "agents.yaml"
    agents = yaml.safe_load(agents_file.read_text(encoding="utf-8"))
    agents["execution"]["tools"] += list(names)
    agents_file.write_text(yaml.safe_dump(agents, allow_unicode=True), encoding="utf-8")
    return config


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> StubReply:
    return StubReply(tool_calls=[StubToolCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls])


async def test_crewai_tools_are_offered_run_and_answered_like_ours(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    words, shout = WordCountTool(), ShoutTool()
    tools = [CrewAITool(words), CrewAITool(shout)]
    assert [tool.name for tool in tools] == ["word_counter", "shout"]
    async with make_harness(crewai_config_dir=_granting(tmp_path, "word_counter", "shout"), tools=tools) as h:
        user = make_user()
        sid = await h.new_session(user)
        h.stub.enqueue(
            intent_needs("Count the words and shout."),
            _calls(
                ("call_w", "word_counter", {"text": "one two three"}),
                ("call_s", "shout", {"text": "hey"}),
                ("call_e", "word_counter", {"text": " "}),
            ),
            execution_done("3 words, HEY", {"words": 3}),
            organized("Three words. HEY!"),
        )

        result = await h.run(user, sid, "count 'one two three' and shout 'hey'")

        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        offered = [tool["function"] for tool in h.stub.requests[1].body["tools"]]
        assert [(tool["name"], tool["description"]) for tool in offered][-2:] == [
            ("word_counter", "Count the words of a text."),
            ("shout", "Upper-case a text."),
        ]
        assert offered[-1]["parameters"]["properties"]["text"]["description"] == "The text whose words to count."
        results = {e["toolCallId"]: e["content"] for e in result.of_type("TOOL_CALL_RESULT")}
        assert results == {
            "call_w": '{"result":"3 words"}',
            "call_s": '{"result":"HEY"}',
            "call_e": '{"error": "no words to count"}',
        }
        tool_turns = [m for m in h.stub.requests[2].messages if m["role"] == "tool"]
        assert [(m["tool_call_id"], m["content"]) for m in tool_turns] == list(results.items())
    assert len(words.ran_on) == 2 and threading.get_ident() not in words.ran_on
    assert shout.ran_on == [asyncio.get_running_loop()]


async def test_a_yaml_that_grants_an_unregistered_tool_stops_start_up(tmp_path: Path) -> None:
    from agent_runtime.engine.flow.template_files import load_flow_templates
    from agent_runtime.engine.flow.templates import TemplateConfigError

    config = _granting(tmp_path, "word_counter")
    try:
        load_flow_templates(config)
    except TemplateConfigError as exc:
        assert "unknown tool 'word_counter'" in str(exc)
    else:
        raise AssertionError("an unregistered tool was accepted")
    assert load_flow_templates(config, ["word_counter"]).execution.agent.tools[-1] == "word_counter"
