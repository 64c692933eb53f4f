"""How long CPython's cyclic garbage collector stops the process, by generation.

A collection holds the GIL from start to end: the event loop, every CrewAI thread and every stream wait for
it. Under load that is where most of the event-loop lag comes from: each run leaves objects in reference
cycles (CrewAI's per-stage agent, executor and flow-method wrappers; LiteLLM's per-call HTTP objects), they
outlive the young generations while the run lasts, and full collections then scan the objects of every run in
flight (docs/benchmarks.md, "Where the lag comes from").

The collector calls `gc.callbacks` in whichever thread triggered the collection, with the GIL held. So the
callback only appends to a deque (atomic under the GIL, takes no lock: a lock held by the interrupted thread
could deadlock it) and the sampler moves the pauses into the Prometheus histogram on the event loop.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from typing import Any

from agent_runtime.observability import metrics

# Pauses recorded between two drains (twice a second): young collections come by the hundred per second under
# load (docs/benchmarks.md, "Where the lag comes from"). Past the bound
# the oldest are dropped rather than memory growing if nothing drains (the sampler is not running).
MAX_PENDING = 10_000


class GcPauses:
    """Records each collection's duration while installed; `drain()` reports them to the metrics."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self._started = 0.0
        self._pending: deque[tuple[int, float]] = deque(maxlen=max_pending)

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def drain(self) -> int:
        """Observe the pauses recorded so far; return how many."""
        count = 0
        while self._pending:
            generation, seconds = self._pending.popleft()
            metrics.gc_pause(generation, seconds)
            count += 1
        return count

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # Collections never overlap (each holds the GIL throughout), so one start time is enough.
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._pending.append((int(info["generation"]), time.perf_counter() - self._started))
