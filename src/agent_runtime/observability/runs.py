"""A run as metrics, a span and log context: begun, first token, stages, completed or failed.

The run service calls `run_began` at the top of the run's own task, then `run_completed()` or
`run_failed(code, error_id)`; everything in between (the gateway's first token, log lines, child spans)
finds the run through a context variable, so nothing has to be threaded through the flow. The task's
context is its own copy (asyncio.create_task), and CrewAI's worker threads get copies of it
(asyncio.to_thread, run_coroutine_threadsafe), so concurrent runs never see each other's observation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from agent_runtime.logging_setup import run_id_var
from agent_runtime.observability import metrics
from agent_runtime.observability.tracing import (
    RUN_ID_ATTRIBUTE,
    SESSION_ID_ATTRIBUTE,
    mark_failed,
    stage_span,
    tracer,
)


@dataclass(eq=False)
class RunObservation:
    run_id: str
    span: Span
    started: float = field(default_factory=time.perf_counter)
    first_token_seen: bool = False
    ended: bool = False

    def first_token(self) -> None:
        if not self.first_token_seen:
            self.first_token_seen = True
            metrics.run_first_token(time.perf_counter() - self.started)

    def end(self, outcome: str, *, error_code: str | None = None, error_id: str | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        metrics.run_finished(time.perf_counter() - self.started, outcome=outcome, error_code=error_code)
        if error_code is not None:
            mark_failed(self.span, error_code, error_id=error_id)
        self.span.end()


_current: ContextVar[RunObservation | None] = ContextVar("run_observation", default=None)


def run_began(run_id: str, session_id: str) -> RunObservation:
    """Start observing the run in the current task: counted, in flight, its span current, its id on log lines."""
    span = tracer.start_span(
        "invoke_agent run",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            RUN_ID_ATTRIBUTE: run_id,
            SESSION_ID_ATTRIBUTE: session_id,
        },
    )
    observation = RunObservation(run_id=run_id, span=span)
    # Attached and never detached: this context is the run task's own copy and ends with the task.
    otel_context.attach(trace.set_span_in_context(span))
    _current.set(observation)
    run_id_var.set(run_id)
    metrics.run_started()
    return observation


def current_run() -> RunObservation | None:
    return _current.get()


def run_completed() -> None:
    observation = _current.get()
    if observation is not None:
        observation.end("completed")


def run_cancelled() -> None:
    """Cancelled by its client (not a failure: the run ends with RUN_FINISHED, outcome cancelled)."""
    observation = _current.get()
    if observation is not None:
        observation.end("cancelled")


def run_handed_over() -> None:
    """Handed over to another replica at a drain: it goes on there (and is counted there as started again)."""
    observation = _current.get()
    if observation is not None:
        observation.end("handed_over")


def run_failed(code: str, error_id: str) -> None:
    observation = _current.get()
    if observation is not None:
        observation.end("failed", error_code=code, error_id=error_id)


@contextmanager
def stage_observed(stage: str) -> Iterator[None]:
    """A flow stage: its span (parent of its model and tool calls) and its duration."""
    started = time.perf_counter()
    try:
        with stage_span(stage):
            yield
    finally:
        metrics.stage_finished(stage, time.perf_counter() - started)
