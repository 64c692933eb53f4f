"""FlowThreads: where CrewAI's flow and its sync steps run (engine/flow/crewai/threads.py)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

import agent_runtime.engine.flow.crewai.threads as threads_module
from agent_runtime.engine.flow.crewai.threads import FlowThreads, waiting_for_the_loop

_marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


async def _where() -> tuple[str, str, asyncio.AbstractEventLoop, str]:
    step_thread = await asyncio.to_thread(lambda: threading.current_thread().name)
    seen = _marker.get()
    _marker.set("set by a previous run")
    return threading.current_thread().name, step_thread, asyncio.get_running_loop(), seen


async def test_a_flow_runs_on_a_flow_thread_with_its_own_loop_and_its_steps_on_the_step_pool() -> None:
    threads = FlowThreads(2, cpu_slots=1)
    try:
        flow_thread, step_thread, loop, seen = await threads.run(_where)
        assert flow_thread.startswith("crewai-flow")
        assert step_thread.startswith("crewai-step")
        assert loop is not asyncio.get_running_loop()
        assert seen == "unset"
        # Threads are reused, context is not: the next run starts clean.
        *_, seen_again = await threads.run(_where)
        assert seen_again == "unset"
        # The caller's context is the flow's (a copy): a run's span and log ids reach its flow thread.
        token = _marker.set("the caller's")
        try:
            *_, seen_from_caller = await threads.run(_where)
        finally:
            _marker.reset(token)
        assert seen_from_caller == "the caller's"
    finally:
        threads.shutdown()


async def test_the_pools_are_bounded_and_never_the_loops_default_executor() -> None:
    threads = FlowThreads(2, cpu_slots=1)
    lock = threading.Lock()
    inside = most = 0
    release = asyncio.Event()
    two_inside = asyncio.Event()
    app_loop = asyncio.get_running_loop()

    async def hold() -> None:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            if inside == 2:
                app_loop.call_soon_threadsafe(two_inside.set)
        # Wait on the app's loop, as a model call does.
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(release.wait(), app_loop))
        with lock:
            inside -= 1

    try:
        runs = [asyncio.create_task(threads.run(hold)) for _ in range(6)]
        await asyncio.wait_for(two_inside.wait(), 10)
        default_thread = await asyncio.to_thread(lambda: threading.current_thread().name)
        assert not default_thread.startswith("crewai")  # the default executor is free while flows wait
        release.set()
        await asyncio.gather(*runs)
        assert most == 2
    finally:
        threads.shutdown()


async def test_at_most_cpu_slots_crewai_threads_run_at_once_and_waiting_for_the_loop_frees_a_slot() -> None:
    threads = FlowThreads(6, cpu_slots=2)
    lock = threading.Lock()
    running = most = waiting = 0
    all_waiting = asyncio.Event()
    release = asyncio.Event()
    app_loop = asyncio.get_running_loop()

    def busy() -> None:
        # CrewAI code holding its slot: sleeps release the GIL, not the slot, so without slots all six overlap.
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        deadline = time.monotonic() + 1
        while running < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.02)
        with lock:
            running -= 1

    def step() -> None:
        nonlocal waiting
        busy()
        with lock:
            waiting += 1
            if waiting == 6:
                app_loop.call_soon_threadsafe(all_waiting.set)
        # A model call: every run's step must get here, whatever the slots, or the runs would wait on each other.
        with waiting_for_the_loop():
            asyncio.run_coroutine_threadsafe(release.wait(), app_loop).result()
        busy()

    async def flow() -> None:
        busy()  # on the flow thread
        await asyncio.to_thread(step)  # on a step thread, while this loop waits
        busy()

    try:
        runs = [asyncio.create_task(threads.run(flow)) for _ in range(6)]
        await asyncio.wait_for(all_waiting.wait(), 10)
        release.set()
        await asyncio.wait_for(asyncio.gather(*runs), 10)
        assert most == 2
    finally:
        release.set()
        threads.shutdown()


async def test_a_step_that_waits_on_another_step_goes_on_without_a_slot_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One slot, held by a step that synchronously waits for a second step of its own flow (no CrewAI path of
    # ours does this; a library version could): the second step gives up waiting for the slot and runs.
    monkeypatch.setattr(threads_module, "SLOT_WAIT_SECONDS", 0.2)
    threads = FlowThreads(2, cpu_slots=1)

    async def flow() -> str:
        private_loop = asyncio.get_running_loop()

        async def inner_step() -> str:
            return await asyncio.to_thread(lambda: "inner ran")

        def outer_step() -> str:
            return asyncio.run_coroutine_threadsafe(inner_step(), private_loop).result()

        return await asyncio.to_thread(outer_step)

    try:
        assert await asyncio.wait_for(threads.run(flow), 10) == "inner ran"
        # And again: the slot the first flow took was given back.
        assert await asyncio.wait_for(threads.run(flow), 10) == "inner ran"
    finally:
        threads.shutdown()
