"""The CrewAI `Flow`'s own bookkeeping stays on the event loop instead of hopping to a thread and back.

`Flow.kickoff_async` hands three synchronous jobs to the loop's default executor (`asyncio.to_thread`): after every
step `Flow._persist_method_completion` (which returns at once without `@persist`), and at the end of a kickoff
`Flow._drain_memory_writes` (at once without CrewAI memory, which our flow skips) and `CrewAIEventsBus.flush` (at
once when no event handler is pending; CrewAI calls it on the loop itself in the same kickoff's `finally`). That is
six thread hand-offs per full turn for jobs of microseconds (docs/benchmarks.md, "Orchestration").
`BookkeepingExecutor`, installed as the app loop's default executor, runs exactly those three inline and everything
else on its threads as before: LiteLLM's request building, DNS look-ups, a synchronous CrewAI tool.

The jobs are recognised by the function `asyncio.to_thread` was given (partials and `Context.run` unwrapped), by
module and qualified name, so nothing here imports CrewAI. PATCHES.md row 7; tests/flow/crewai/test_crewai_patches.py
reads CrewAI's code for the three calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")

INLINE: frozenset[tuple[str, str]] = frozenset(
    {
        ("crewai.flow.runtime", "Flow._persist_method_completion"),
        ("crewai.flow.runtime", "Flow._drain_memory_writes"),
        ("crewai.events.event_bus", "CrewAIEventsBus.flush"),
    }
)


def _job(fn: object, args: tuple[Any, ...]) -> object:
    """The function a job runs, as `asyncio.to_thread` wraps it: `partial(Context.run, function, *args)`."""
    while True:
        if isinstance(fn, functools.partial):
            wrapped: functools.partial[Any] = fn
            fn, args = wrapped.func, (*wrapped.args, *args)
        elif isinstance(getattr(fn, "__self__", None), contextvars.Context) and args:
            fn, args = args[0], args[1:]
        else:
            return fn


def is_bookkeeping(fn: Callable[..., Any], *args: Any) -> bool:
    function = getattr(_job(fn, args), "__func__", None)
    return (getattr(function, "__module__", None), getattr(function, "__qualname__", None)) in INLINE


class BookkeepingExecutor(ThreadPoolExecutor):
    """The loop's default executor, with the `Flow`'s bookkeeping run inline (see the module docstring)."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        if not is_bookkeeping(fn, *args):
            return super().submit(fn, *args, **kwargs)
        done: Future[_T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting coroutine, as a thread's job would be
            done.set_exception(exc)
        return done


_installed: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Once per loop (an app started again on the same loop, as tests do, keeps the executor it has)."""
    if loop not in _installed:
        loop.set_default_executor(BookkeepingExecutor(thread_name_prefix="asyncio"))
        _installed.add(loop)
