"""Starts before work: admitted runs wait while other runs are being started (so that in a burst every request gets
its first event or its refusal before the runs take the loop and the pool), and never longer than a bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent_runtime.engine.runs import admission as admission_module
from agent_runtime.engine.runs.admission import Admission


async def test_a_run_begins_once_every_start_in_progress_is_done() -> None:
    admission = Admission(10)
    order: list[str] = []

    async def run() -> None:
        await admission.after_starts()
        order.append("run begins")

    with admission.starting():
        with admission.starting():
            task = asyncio.create_task(run())
            await asyncio.sleep(0.05)
            order.append("first start done")
        await asyncio.sleep(0.05)
        order.append("second start done")
    await asyncio.wait_for(task, 1)
    assert order == ["first start done", "second start done", "run begins"]
    # With no start in progress a run begins at once.
    started = time.monotonic()
    await admission.after_starts()
    assert time.monotonic() - started < 0.01


async def test_under_a_steady_stream_of_starts_a_run_waits_at_most_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission_module, "START_PRIORITY_SECONDS", 0.2)
    admission = Admission(10)
    with admission.starting():
        started = time.monotonic()
        await admission.after_starts()
        assert 0.15 < time.monotonic() - started < 0.5


async def test_a_failed_start_does_not_hold_the_runs_back() -> None:
    admission = Admission(10)
    with pytest.raises(RuntimeError), admission.starting():
        raise RuntimeError("refused")
    await asyncio.wait_for(admission.after_starts(), 0.05)
