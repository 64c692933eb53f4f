"""The process's warm-up, off the event loop: CrewAI and LiteLLM imported, the LLM client built and primed."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import threading
from collections.abc import Callable
from typing import Literal, TypeVar

from agent_runtime.engine.flow.turn import load_agent
from agent_runtime.engine.llm.client import Clock, LLMClient
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)

_T = TypeVar("_T")
# What readiness reports until the warm-up is done: a first run sent earlier would wait seconds for it.
WarmupState = Literal["warming_up", "warm", "failed"]


async def _in_daemon_thread(work: Callable[[], _T]) -> _T:
    """`work()` on a daemon thread of its own. Not `asyncio.to_thread`: the interpreter joins the default
    executor's threads at exit, so a stop right after start-up waited for the whole import."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def on_loop(settle: Callable[[], None]) -> None:
        if not done.cancelled():
            settle()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # handed to the awaiting coroutine
            settle = functools.partial(done.set_exception, exc)
        else:
            settle = functools.partial(done.set_result, result)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(on_loop, settle)

    threading.Thread(target=run, name="warm-up", daemon=True).start()
    return await done


class Warmup:
    def __init__(self, settings: Settings, *, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock = clock
        self._llm: LLMClient | None = None
        self._task: asyncio.Task[None] | None = None

    def client(self) -> LLMClient:
        # Built on first use: it imports LiteLLM (seconds of CPU), which `serve` must not wait for.
        if self._llm is None:
            self._llm = LLMClient(self._settings, clock=self._clock)
        return self._llm

    @property
    def state(self) -> WarmupState:
        task = self._task
        if task is None or not task.done() or task.cancelled():
            return "warming_up"
        return "failed" if task.exception() is not None else "warm"

    def ensure(self) -> asyncio.Task[None]:
        """The one warm-up task (started on first call): start-up kicks it off, every run awaits it."""
        if self._task is None:
            self._task = asyncio.create_task(self._warm_up(), name="warm-up")
            self._task.add_done_callback(_log_failure)
        return self._task

    async def wait(self, *, unless: asyncio.Event) -> None:
        """Until the warm-up is done (raising its error), or until `unless` is set."""
        warm_up = self.ensure()
        stop = asyncio.create_task(unless.wait(), name="warm-up-wait")
        try:
            await asyncio.wait({warm_up, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if warm_up.done():
            warm_up.result()

    async def _warm_up(self) -> None:
        """Import CrewAI and LiteLLM off the event loop: importing them on it would stall every request
        (and database call) in flight for seconds."""
        # Importing CrewAI and LiteLLM (and building the LLM client, which imports LiteLLM) is blocking CPU
        # work that neither library offers an async way to do; a thread keeps the loop serving requests
        # meanwhile (the import lock makes a concurrent first run simply wait).
        await _in_daemon_thread(lambda: load_agent(self._settings.data_dir))
        await _in_daemon_thread(lambda: __import__("agent_runtime.engine.runs.gateway.gateway"))
        await _in_daemon_thread(self.client)
        await _in_daemon_thread(self.client().prime)
        # The imports leave hundreds of thousands of long-lived objects, and every full collection scans them all
        # with every thread stopped, the event loop included: the stall when many runs start at once
        # (docs/benchmarks.md, "Where the lag comes from"). Freezing moves them out of the collector's sight;
        # they are module-level and never garbage.
        gc.freeze()
        await _in_daemon_thread(_release_freed_memory)


def _release_freed_memory() -> None:
    """Hand the heap pages the imports used and freed (parsing the tokenizer's JSON, mostly) back to the system.
    glibc keeps them in its arenas otherwise: ~30 MB of RSS (docs/benchmarks.md, "Load"). A no-op elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _log_failure(task: asyncio.Task[None]) -> None:
    # Once, with the traceback: every run awaiting the task fails with the same error, and readiness says
    # `warm_up_failed` from now on (a broken CrewAI or LiteLLM install; a restart will not mend it).
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("warm-up failed: no run can start", exc_info=exc)
