"""A cancel stops a running tool: its coroutine is cancelled, unless its definition says it may not be cut (then it
finishes first, within its timeout); either way its result row and TOOL_CALL_RESULT say what happened."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import BaseModel
from tests.conftest import User
from tests.runs.conftest import MakeHarness, RunResult, crewai_config, intent_needs
from tests.stubs.deepseek_stub import StubReply, StubToolCall

from agent_runtime.engine.conversation.metadata import ToolResultMetadata
from agent_runtime.engine.flow.tools import Tool, ToolArgs
from agent_runtime.engine.profiles.models import UserAgentContext


class Done(BaseModel):
    done: bool = True


class Waiting(Tool[ToolArgs]):
    """Runs until released (or cut), noting how it ended."""

    def __init__(self, name: str, *, cancellable: bool) -> None:
        super().__init__(
            name=name, description="Wait.", args_model=ToolArgs, timeout_seconds=30, cancellable=cancellable
        )
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cut = asyncio.Event()
        self.ended: list[str] = []

    async def execute(self, args: ToolArgs, ctx: UserAgentContext) -> BaseModel:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.ended.append("cut")
            self.cut.set()
            raise
        self.ended.append("finished")
        return Done()


def _granting(tmp_path: Path, *names: str) -> Path:
    config = crewai_config(tmp_path)
    agents_file = config / "agents.yaml"
    agents = yaml.safe_load(agents_file.read_text(encoding="utf-8"))
    agents["execution"]["tools"] += list(names)
    agents_file.write_text(yaml.safe_dump(agents), encoding="utf-8")
    return config


CUT = json.dumps({"error": "cancelled: the run was stopped before the tool finished"})


async def test_a_cancel_cuts_a_running_tool_and_lets_one_that_may_not_be_cut_finish(
    make_harness: MakeHarness, make_user: Callable[[], User], tmp_path: Path
) -> None:
    lookup, write = Waiting("slow_lookup", cancellable=True), Waiting("careful_write", cancellable=False)
    async with make_harness(
        crewai_config_dir=_granting(tmp_path, "slow_lookup", "careful_write"), tools=[lookup, write]
    ) as h:
        user = make_user()
        sid = await h.new_session(user)
        calls = [StubToolCall(id="call_l", name="slow_lookup"), StubToolCall(id="call_w", name="careful_write")]
        h.stub.enqueue(intent_needs("Look it up and write it down."), StubReply(tool_calls=calls))
        run = asyncio.create_task(h.run(user, sid, "look it up and write it down"))
        async with asyncio.timeout(30):
            await lookup.started.wait()
            await write.started.wait()
        (listed,) = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
        cancel = await h.client.post(f"/v1/sessions/{sid}/runs/{listed['id']}/cancel", headers=user.headers)
        assert cancel.status_code == 202
        async with asyncio.timeout(5):
            await lookup.cut.wait()  # the cut tool's coroutine ends at once...
        assert not run.done()  # ...while the run waits for the one that may not be cut
        write.release.set()
        async with asyncio.timeout(30):
            result: RunResult = await run

        assert (lookup.ended, write.ended) == (["cut"], ["finished"])
        assert result.events[-1]["outcome"] == {"type": "cancelled"}
        results = [(e["toolCallId"], e["content"]) for e in result.of_type("TOOL_CALL_RESULT")]
        assert results == [("call_l", CUT), ("call_w", '{"done":true}')]
        await h.engine.runs.wait_idle()
        rows = [r for r in await h.rows(user, sid) if isinstance(r.metadata, ToolResultMetadata)]
        assert [(r.content, r.metadata.is_error, r.metadata.cancelled) for r in rows] == [
            (CUT, True, True),
            ('{"done":true}', False, None),
        ]
        runs = (await h.client.get(f"/v1/sessions/{sid}/runs", headers=user.headers)).json()["items"]
        assert [r["status"] for r in runs] == ["cancelled"]
