"""The app loop's default executor runs the CrewAI Flow's bookkeeping inline and everything else on its threads."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent_runtime.engine.flow.turn import is_agent_bookkeeping, load_agent

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-bookkeeping-{os.getpid()}"
load_agent(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

from crewai.flow.flow import Flow, listen, start  # noqa: E402

from agent_runtime.engine.loop_executor import InlineExecutor  # noqa: E402


class Two(Flow[dict[str, str]]):
    _skip_auto_memory = True

    @start()
    async def first(self) -> str:
        return "a"

    @listen(first)
    async def second(self) -> str:
        return "b"


def test_a_kickoff_sends_no_job_to_a_thread_and_other_jobs_still_go_to_one() -> None:
    threads: list[str] = []

    class Counting(InlineExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if not self.runs_inline(fn, *args, **kwargs):
                threads.append(repr(fn))
            return super().submit(fn, *args, **kwargs)

    async def main() -> tuple[object, int]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(Counting((is_agent_bookkeeping,)))
        result = await Two(suppress_flow_events=True).kickoff_async()
        assert threads == []
        other = await asyncio.to_thread(threading.get_ident)
        return result, other

    result, other = asyncio.run(main())
    assert result == "b"
    assert other != threading.get_ident() and len(threads) == 1


def test_a_kickoff_hands_no_job_to_any_thread(monkeypatch: Any) -> None:
    # Neither to the loop's executor (the bookkeeping runs inline) nor to CrewAI's event bus (its listener's
    # listener's handlers of the flow's events are unregistered when the agent loads: bookkeeping.py).
    submitted: list[str] = []
    original = ThreadPoolExecutor.submit

    def noting(self: ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        submitted.append(repr(fn))
        return original(self, fn, *args, **kwargs)

    async def main() -> object:
        asyncio.get_running_loop().set_default_executor(InlineExecutor((is_agent_bookkeeping,)))
        monkeypatch.setattr(ThreadPoolExecutor, "submit", noting)
        return await Two(suppress_flow_events=True).kickoff_async()

    assert asyncio.run(main()) == "b"
    assert submitted == []
