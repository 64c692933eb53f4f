"""The threads CrewAI's synchronous executor runs on: two bounded pools, owned by the run service.

CrewAI's agent executor is a Flow whose steps are sync functions, run with `asyncio.to_thread`; each step
waits for a model call or a tool that runs on the app's event loop. Where those threads come from decides
whether runs can starve each other. They used to share the loop's default executor with LiteLLM, which
runs part of every `acompletion` there (`loop.run_in_executor(None, ...)`): past 64 runs in flight, every
run waited for a thread that another waiting run held, and most timed out (docs/threads.md). Now:

- `crewai-flow` (one thread per run in flight): drives the run's CrewAI flow on a private event loop, so
  CrewAI's blocking bookkeeping (event-bus flushes, executor construction) stays off the app's loop.
- `crewai-step`: the private loops' default executor, where the executor's sync steps run. A run has one
  step at a time, so it needs at most one thread here.

Both are sized from `MAX_CONCURRENT_RUNS`, and admission control never admits more runs than that, so a
run never waits for a thread. No thread of either pool waits for a thread of its own pool, and neither is
the default executor that LiteLLM, DNS look-ups and `asyncio.to_thread` on the app's loop use.

CPU slots (`CREWAI_CPU_SLOTS`, default 1): how many of these threads, across all runs, may run Python at
once. Without them, 64 runs starting together meant ~128 runnable threads taking turns at the GIL with the
event loop, which then got about one turn in a hundred: requests, refusals, RUN_STARTED and SSE writes
waited seconds. With one slot the loop competes with one CrewAI thread at a time, and throughput is unchanged
(one GIL either way; measured in docs/benchmarks.md, linked from docs/threads.md). A thread holds its slot only while it
runs CrewAI code: a flow thread gives it back whenever its private loop waits (`_SlotSelector`), a step
thread while it waits for the app's loop (`waiting_for_the_loop`, around every model call and tool) and at
the end of its step. No thread of ours waits for a slot while holding one, or while holding anything the app's
loop or a slot holder needs; and a thread that waits longer than `SLOT_WAIT_SECONDS` goes on without one, so
even a library that did would only lose the slots' benefit, never hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import selectors
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")

# A thread that waits this long for a slot runs without one. Slot holders give theirs back within a CrewAI
# step's CPU work (milliseconds to tens of them), so a longer wait means a holder is blocked on something that
# needs another slot: a CrewAI version that waited on one of its own step threads from another would otherwise
# hang every run of the process. Past the wait, the cost is only the old contention for the GIL.
SLOT_WAIT_SECONDS = 2.0


class _Slots:
    """`CREWAI_CPU_SLOTS` slots; `take` says whether it got one, and only a slot taken is given back."""

    def __init__(self, count: int) -> None:
        self._free = threading.Semaphore(count)

    def take(self) -> bool:
        return self._free.acquire(timeout=SLOT_WAIT_SECONDS)

    def give(self, taken: bool) -> None:
        if taken:
            self._free.release()


# What a `crewai-step` thread holds while it runs a step (per thread: pool threads are reused).
_held = threading.local()


@contextlib.contextmanager
def waiting_for_the_loop() -> Iterator[None]:
    """Give this thread's CPU slot back while it blocks on the app's loop (a model call, a tool); a no-op on a
    thread that holds none (a flow driven without `FlowThreads`, as some tests do)."""
    slots: _Slots | None = getattr(_held, "slots", None)
    if slots is None:
        yield
        return
    slots.give(_held.taken)
    try:
        yield
    finally:
        _held.taken = slots.take()


class _SlotSelector(selectors.DefaultSelector):
    """A flow's private loop waits for its step (or anything else) in `select`: without its slot."""

    def __init__(self, slots: _Slots, taken: bool) -> None:
        super().__init__()
        self._slots = slots
        self.taken = taken

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self._slots.give(self.taken)
        try:
            return super().select(timeout)
        finally:
            self.taken = self._slots.take()


class _PoolView(ThreadPoolExecutor):
    """A private loop's default executor that lends it the shared step pool.

    `asyncio` insists on a ThreadPoolExecutor (3.11+) and shuts the default executor down when the loop's
    runner closes; the view submits to the shared pool and ignores the shutdown. It never starts threads
    of its own (ThreadPoolExecutor only starts them in `submit`, which is overridden).
    """

    def __init__(self, pool: ThreadPoolExecutor, slots: _Slots) -> None:
        super().__init__(max_workers=1)
        self._pool = pool
        self._slots = slots

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        return self._pool.submit(self._slotted, fn, *args, **kwargs)

    def _slotted(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        _held.slots, _held.taken = self._slots, self._slots.take()
        try:
            return fn(*args, **kwargs)
        finally:
            self._slots.give(_held.taken)
            _held.slots = None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


class FlowThreads:
    """The two pools and the CPU slots; build one per process (the run service does), `shutdown()` it at exit."""

    def __init__(self, max_runs: int, *, cpu_slots: int) -> None:
        self.max_runs = max_runs
        self._flows = ThreadPoolExecutor(max_workers=max_runs, thread_name_prefix="crewai-flow")
        self._steps = ThreadPoolExecutor(max_workers=max_runs, thread_name_prefix="crewai-step")
        self._slots = _Slots(cpu_slots)

    async def run(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run the coroutine `make()` builds on a private loop in a `crewai-flow` thread; await its result.

        Cancelling the await does not stop the thread (nothing can): the caller must make the coroutine end,
        as `AgentFlow.run` does by closing the run's model calls.
        """
        # The flow's private loop, thread and pools exist because CrewAI's executor offers no async path
        # for its steps (see the module docstring); this is the one place where a run takes a thread.
        # The run's own context goes with it (a copy, taken here in the run's task): its trace span and the
        # run id on its log lines follow the flow into the thread, and nothing of an earlier run on the same
        # pool thread can leak in (each run brings its own copy).
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._flows, self._drive, make, context)

    def _drive(self, make: Callable[[], Coroutine[Any, Any, _T]], context: contextvars.Context) -> _T:
        selector = _SlotSelector(self._slots, self._slots.take())

        def new_loop() -> asyncio.AbstractEventLoop:
            loop = asyncio.SelectorEventLoop(selector)
            loop.set_default_executor(_PoolView(self._steps, self._slots))
            return loop

        try:
            with asyncio.Runner(loop_factory=new_loop) as runner:
                return runner.run(make(), context=context)
        finally:
            self._slots.give(selector.taken)

    def shutdown(self) -> None:
        """Stop accepting work; threads still driving a flow finish on their own (they cannot be interrupted)."""
        self._flows.shutdown(wait=False, cancel_futures=True)
        self._steps.shutdown(wait=False, cancel_futures=True)
