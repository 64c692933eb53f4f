"""The threads CrewAI's synchronous executor runs on: two bounded pools, owned by the run service.

CrewAI's agent executor is a Flow whose steps are sync functions, run with `asyncio.to_thread`; each step
waits for a model call or a tool that runs on the app's event loop. Where those threads come from decides
whether runs can starve each other. They used to share the loop's default executor with LiteLLM, which
runs part of every `acompletion` there (`loop.run_in_executor(None, ...)`): past 64 runs in flight, every
run waited for a thread that another waiting run held (100 runs at 0.5 s per model call: 36 finished, 64
timed out; docs/threads.md). Now:

- `crewai-flow` (one thread per run in flight): drives the run's CrewAI flow on a private event loop, so
  CrewAI's blocking bookkeeping (event-bus flushes, executor construction) stays off the app's loop.
- `crewai-step`: the private loops' default executor, where the executor's sync steps run. A run has one
  step at a time, so it needs at most one thread here.

Both are sized from `MAX_CONCURRENT_RUNS`, and admission control never admits more runs than that, so a
run never waits for a thread. No thread of either pool waits for a thread of its own pool, and neither is
the default executor that LiteLLM, DNS look-ups and `asyncio.to_thread` on the app's loop use.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")


class _PoolView(ThreadPoolExecutor):
    """A private loop's default executor that lends it the shared step pool.

    `asyncio` insists on a ThreadPoolExecutor (3.11+) and shuts the default executor down when the loop's
    runner closes; the view submits to the shared pool and ignores the shutdown. It never starts threads
    of its own (ThreadPoolExecutor only starts them in `submit`, which is overridden).
    """

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        super().__init__(max_workers=1)
        self._pool = pool

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


class FlowThreads:
    """The two pools; build one per process (the run service does) and `shutdown()` it at exit."""

    def __init__(self, max_runs: int) -> None:
        self.max_runs = max_runs
        self._flows = ThreadPoolExecutor(max_workers=max_runs, thread_name_prefix="crewai-flow")
        self._steps = ThreadPoolExecutor(max_workers=max_runs, thread_name_prefix="crewai-step")

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
        def new_loop() -> asyncio.AbstractEventLoop:
            loop = asyncio.new_event_loop()
            loop.set_default_executor(_PoolView(self._steps))
            return loop

        with asyncio.Runner(loop_factory=new_loop) as runner:
            return runner.run(make(), context=context)

    def shutdown(self) -> None:
        """Stop accepting work; threads still driving a flow finish on their own (they cannot be interrupted)."""
        self._flows.shutdown(wait=False, cancel_futures=True)
        self._steps.shutdown(wait=False, cancel_futures=True)
