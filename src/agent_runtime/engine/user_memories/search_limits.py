"""How many memory searches (`GET /v1/memories?q=`) a user, and the whole process, may have.

A search embeds its query on the embedding threads every run's recall uses too (lanes.py lets recalls go first);
these limits bound how much of that one user, and all users together, can ask for. Checked on the event loop
before the search starts, so a refusal waits for nothing: per user, at most USER_MEMORIES_SEARCHES_AT_ONCE_PER_USER
in flight and USER_MEMORIES_SEARCHES_PER_MINUTE (a bucket of that many, refilled at that rate; 429
`too_many_searches`), and at most USER_MEMORIES_SEARCHES_AT_ONCE in flight in the process (503 `search_busy`).
Per process, like the threads they protect: N worker processes allow N times as many.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from uuid import UUID

from agent_runtime.engine.errors import SearchBusyError, TooManySearchesError

# The buckets of this many users are kept, the least recently searching one forgotten past it (a forgotten
# bucket starts full again: that user was quiet while this many others searched).
MAX_TRACKED_USERS = 10_000
# A search takes milliseconds: one in flight is done long before a second.
_BUSY_RETRY_AFTER_SECONDS = 1


@dataclass
class _Bucket:
    tokens: float
    at: float


class SearchLimiter:
    def __init__(
        self,
        *,
        per_minute: int,
        at_once_per_user: int,
        at_once: int,
        clock: Callable[[], float] = time.monotonic,
        max_users: int = MAX_TRACKED_USERS,
    ) -> None:
        self._per_minute = per_minute
        self._per_second = per_minute / 60
        self._at_once_per_user = at_once_per_user
        self._at_once = at_once
        self._clock = clock
        self._max_users = max_users
        self._buckets: OrderedDict[UUID, _Bucket] = OrderedDict()
        # Only users with a search in flight: never more than `at_once` of them.
        self._running: dict[UUID, int] = {}
        self._in_flight = 0

    @contextlib.contextmanager
    def admit(self, user_id: UUID) -> Iterator[None]:
        """Around one search; raises TooManySearchesError (429) or SearchBusyError (503) instead of waiting."""
        running = self._running.get(user_id, 0)
        if running >= self._at_once_per_user:
            raise TooManySearchesError(
                f"{running} of your memory searches are in flight, the most one user may; retry when one is done",
                retry_after=_BUSY_RETRY_AFTER_SECONDS,
            )
        bucket = self._bucket(user_id)
        if bucket.tokens < 1:
            wait = (1 - bucket.tokens) / self._per_second
            raise TooManySearchesError(
                f"at most {self._per_minute} memory searches a minute; retry in {math.ceil(wait)} s",
                retry_after=wait,
            )
        if self._in_flight >= self._at_once:
            raise SearchBusyError(
                f"this server runs as many memory searches as it may ({self._at_once}); retry shortly",
                retry_after=_BUSY_RETRY_AFTER_SECONDS,
            )
        bucket.tokens -= 1
        self._running[user_id] = running + 1
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            left = self._running[user_id] - 1
            if left:
                self._running[user_id] = left
            else:
                del self._running[user_id]

    def _bucket(self, user_id: UUID) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.get(user_id)
        if bucket is None:
            bucket = self._buckets[user_id] = _Bucket(tokens=self._per_minute, at=now)
            if len(self._buckets) > self._max_users:
                self._buckets.popitem(last=False)
            return bucket
        self._buckets.move_to_end(user_id)
        bucket.tokens = min(self._per_minute, bucket.tokens + (now - bucket.at) * self._per_second)
        bucket.at = now
        return bucket
