"""The app loop's default executor: a thread pool that runs a few known jobs inline instead.

Our libraries hand synchronous work to the loop's default executor (`asyncio.to_thread`,
`loop.run_in_executor(None, ...)`). Some of that work never blocks: the CrewAI `Flow`'s bookkeeping (microseconds)
and LiteLLM's building of a request that an async client then sends. For those the thread hop costs more than the
job: a queue, a thread wake-up and two GIL hand-offs, during which the loop waits (docs/threads.md). Each rule
names the jobs it knows to be non-blocking; every other job runs on the pool's threads as before (a DNS look-up, a
synchronous tool, a provider whose LiteLLM path is synchronous).

A job is recognised by the function it runs, unwrapped from the `functools.partial` and `Context.run` layers that
`asyncio.to_thread` and LiteLLM wrap around it, by module and qualified name: nothing here imports a library.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class Job:
    """What a submitted job runs: the innermost function, its positional and keyword arguments."""

    function: object
    args: tuple[Any, ...] = ()
    keywords: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> tuple[str | None, str | None]:
        """(module, qualified name) of the function, or of a bound method's function."""
        function = getattr(self.function, "__func__", self.function)
        return getattr(function, "__module__", None), getattr(function, "__qualname__", None)


InlineRule = Callable[[Job], bool]


def job_of(fn: object, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None) -> Job:
    keywords: dict[str, Any] = dict(kwargs or {})
    while True:
        if isinstance(fn, functools.partial):
            wrapped: functools.partial[Any] = fn
            fn, args, keywords = wrapped.func, (*wrapped.args, *args), {**wrapped.keywords, **keywords}
        elif isinstance(getattr(fn, "__self__", None), contextvars.Context) and args:
            fn, args = args[0], args[1:]
        else:
            return Job(function=fn, args=args, keywords=keywords)


class InlineExecutor(ThreadPoolExecutor):
    """The loop's default executor, with the jobs a rule recognises run inline (see the module docstring)."""

    def __init__(self, rules: Sequence[InlineRule]) -> None:
        super().__init__(thread_name_prefix="asyncio")
        self._rules = tuple(rules)

    def runs_inline(self, fn: object, *args: Any, **kwargs: Any) -> bool:
        job = job_of(fn, args, kwargs)
        return any(rule(job) for rule in self._rules)

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        if not self.runs_inline(fn, *args, **kwargs):
            return super().submit(fn, *args, **kwargs)
        done: Future[_T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting coroutine, as a thread's job would be
            done.set_exception(exc)
        return done


_installed: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def install(loop: asyncio.AbstractEventLoop, rules: Sequence[InlineRule]) -> None:
    """Once per loop (an app started again on the same loop, as tests do, keeps the executor it has)."""
    if loop not in _installed:
        loop.set_default_executor(InlineExecutor(rules))
        _installed.add(loop)
