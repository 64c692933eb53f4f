"""One run's event log in the process that runs it: sequence numbers, followers, and batched writes.

Every AG-UI event a run emits gets the next sequence number and is kept here as the exact JSON text the
stream sends (`LoggedEvent.data`), so a stream resumed later, on any replica, repeats it byte for byte. The
SSE frame carries `id: <run_id>:<seq>`.

Writes to PostgreSQL are batched by who needs them, because a run emits hundreds of text deltas:
- the terminal event (RUN_FINISHED / RUN_ERROR) is always written, with everything before it: most runs
  cost **one** statement for their whole log;
- while a follower on another replica watches the run (`go_live`, asked for over LISTEN/NOTIFY), events are
  written as they come, coalesced per event-loop turn, each write with a NOTIFY that wakes the followers.
A follower in this process reads the log in memory and costs nothing. If the process dies before its
terminal event is written, the lease sweep ends the log with RUN_ERROR `run_lost` (store.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from ag_ui.core import BaseEvent, RunErrorEvent, RunFinishedEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    seq: int
    data: str
    terminal: bool

    def sse(self, run_id: UUID) -> str:
        return f"id: {run_id}:{self.seq}\ndata: {self.data}\n\n"


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events to append to the stored log; `notify` wakes followers on other replicas."""

    run_id: UUID
    user_id: UUID
    events: list[LoggedEvent]
    notify: bool


# Writes `batch`; the terminal event, if any, is last in it. Raises on failure.
EventWriter = Callable[[EventBatch], Awaitable[None]]
_WRITE_ATTEMPTS = 5
_FIRST_RETRY_SECONDS = 0.05


class RunEventLog:
    def __init__(self, run_id: UUID, user_id: UUID, writer: EventWriter, *, after: int = 0) -> None:
        """`after`: the seq this log's events follow (a run taken over continues its log past the dead process's)."""
        self.run_id = run_id
        self.user_id = user_id
        self._writer = writer
        self._after = after
        self._events: list[LoggedEvent] = []
        self._unwritten: list[LoggedEvent] = []
        self._changed = asyncio.Event()
        self._live = False
        self._writing: asyncio.Task[None] | None = None

    @property
    def finished(self) -> bool:
        return bool(self._events) and self._events[-1].terminal

    def append(self, event: BaseEvent, *, ends: bool | None = None, stored: bool = True) -> LoggedEvent:
        """Number the event and keep it (synchronous: the emitter runs on the event loop and never waits). `ends`:
        whether it ends the log (None: RUN_FINISHED and RUN_ERROR do; a takeover's RUN_ERROR does not). `stored`:
        False for an event only this process's followers get (the end of a run handed over: its log goes on)."""
        if self.finished:
            raise RuntimeError(f"run {self.run_id}: event after the terminal event")
        # What EventEncoder sends (by alias; the models leave unset optional fields out themselves).
        logged = LoggedEvent(
            seq=self._after + len(self._events) + 1,
            data=event.model_dump_json(by_alias=True),
            terminal=isinstance(event, RunFinishedEvent | RunErrorEvent) if ends is None else ends,
        )
        self._events.append(logged)
        self._changed.set()
        self._changed = asyncio.Event()
        if not stored:
            return logged
        self._unwritten.append(logged)
        if logged.terminal or self._live:
            self._write_soon()
        return logged

    async def follow(self, after: int = 0) -> AsyncIterator[LoggedEvent]:
        """Every event with seq > `after`, then each new one as it comes, until the terminal event."""
        position = max(0, after - self._after)
        while True:
            while position < len(self._events):
                event = self._events[position]
                position += 1
                yield event
                if event.terminal:
                    return
            if self.finished:
                return  # `after` was past the end: nothing more will come
            await self._changed.wait()

    def go_live(self) -> None:
        """A follower on another replica watches: write what is pending now, and every event from here on."""
        if not self._live:
            self._live = True
            self._write_soon()

    async def written(self) -> None:
        """Until every event appended so far has been written (or given up on)."""
        while self._writing is not None and not self._writing.done():
            await asyncio.shield(self._writing)

    def _write_soon(self) -> None:
        if self._unwritten and (self._writing is None or self._writing.done()):
            self._writing = asyncio.create_task(self._write_pending(), name=f"event-log-{self.run_id}")

    async def _write_pending(self) -> None:
        # Yield once first: events appended in the same turn of the loop (a tool call is three) share a write.
        await asyncio.sleep(0)
        while self._unwritten:
            batch, self._unwritten = self._unwritten, []
            await self._write(EventBatch(run_id=self.run_id, user_id=self.user_id, events=batch, notify=self._live))

    async def _write(self, batch: EventBatch) -> None:
        delay = _FIRST_RETRY_SECONDS
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                await self._writer(batch)
                return
            except Exception:
                if attempt == _WRITE_ATTEMPTS:
                    # Followers here still have every event; elsewhere, the sweep ends an incomplete log.
                    log.error(
                        "could not store run events",
                        exc_info=True,
                        extra={"run_id": str(self.run_id), "first_seq": batch.events[0].seq},
                    )
                    return
                await asyncio.sleep(delay)
                delay *= 2
