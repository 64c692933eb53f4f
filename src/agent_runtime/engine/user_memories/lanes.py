"""Who goes first on the embedding threads: a run's recall before an extraction, an extraction before a search.

The local model has `MEMORY_EMBEDDING_THREADS` threads for every embedding of the process. One user's searches
(`GET /v1/memories?q=`) used to queue in front of every run's recall, first come first served: 100 of them in
flight took other users' runs from 0.46 s to 14.8 s (issue 32). Here a job waits on the event loop, not in the
thread pool's queue, until a thread is free, and a free thread takes the waiting job of the most urgent lane
(first come first served within a lane): a recall waits for at most the jobs already running, never for searches
that arrived before it. How many searches can wait at all is bounded before they get here (search_limits.py).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from enum import IntEnum


class Lane(IntEnum):
    """Lower goes first."""

    RUN = 0  # a run's recall, the forget tool: a user waits for the answer
    EXTRACTION = 1  # after a turn, in the background
    SEARCH = 2  # GET /v1/memories?q=


class LaneGate:
    """At most `slots` holders at once; the waiters are let in by lane. Used on the event loop only, so no lock."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: list[tuple[Lane, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, lane: Lane) -> None:
        # A free slot means nobody alive waits: a release hands its slot to the first live waiter.
        if self._free > 0:
            self._free -= 1
            return
        entry = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (lane, next(self._arrivals), entry))
        try:
            await entry
        except asyncio.CancelledError:
            if entry.done() and not entry.cancelled():
                self.release()  # handed the slot as it was cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiting:
            _, _, entry = heapq.heappop(self._waiting)
            if not entry.done():  # a cancelled waiter stays in the heap until it comes up
                entry.set_result(None)
                return
        self._free += 1
