"""The process's run event logs, and following runs that run elsewhere (docs/api.md, "Resuming a stream").

- The runs this process runs have their log in memory (`RunEventLog`); a follower here reads it there.
- A run that runs on another replica (or has finished) is read from the stored log. The follower first asks
  the process that runs it to write its events as they come (NOTIFY `agent_run_control` `follow:<id>`),
  then reads what is stored and waits for `agent_run_events` notifications between reads, re-reading at
  least every `_POLL_SECONDS` in case a notification was missed (a reconnect). It ends with the terminal event.
- One dedicated connection per process LISTENs to both channels (reconnecting when it drops); `cancel:<id>`
  stops the run here if it runs here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from uuid import UUID

import asyncpg

from agent_runtime.db.outage import is_unavailable
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import AppError, NotFoundError
from agent_runtime.engine.runs.events.log import LoggedEvent, RunEventLog
from agent_runtime.engine.runs.events.repository import CONTROL_CHANNEL, EVENTS_CHANNEL
from agent_runtime.engine.runs.events.store import EventStore, RunLogPage

log = logging.getLogger(__name__)

_POLL_SECONDS = 1.0
_READ_BATCH = 500
_RECONNECT_SECONDS = 1.0


class EventsExpiredError(AppError):
    status_code = 410
    code = "events_expired"


def _set_on_close(lost: asyncio.Event, _conn: object) -> None:
    lost.set()


def run_not_found(run_id: UUID) -> NotFoundError:
    return NotFoundError(f"run {run_id} not found")


class RunEventHub:
    def __init__(
        self, store: EventStore, *, dsn: str | None, on_cancel: Callable[[UUID], None], connect_timeout: float = 2.0
    ) -> None:
        self._store = store
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._on_cancel = on_cancel
        self._logs: dict[UUID, RunEventLog] = {}
        self._waiters: dict[UUID, set[asyncio.Event]] = {}
        self._listening: asyncio.Task[None] | None = None

    # -- the runs of this process --------------------------------------------------------------------

    def open_log(self, run_id: UUID, user_id: UUID, *, after: int = 0) -> RunEventLog:
        run_log = RunEventLog(run_id, user_id, self._store.append, after=after)
        self._logs[run_id] = run_log
        return run_log

    async def close_log(self, run_log: RunEventLog) -> None:
        """Once the run's last event is written: from then on its followers read the stored log."""
        try:
            await run_log.written()
        finally:
            self._logs.pop(run_log.run_id, None)

    # -- following -----------------------------------------------------------------------------------

    async def follow(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, *, after: int
    ) -> AsyncIterator[LoggedEvent]:
        """The run's events after seq `after`, to its terminal event. Checks first (404 for a run that is not
        the caller's, 410 when retention removed its events), so that an error is an HTTP status, not a stream."""
        local = self._logs.get(run_id)
        # For a run that runs elsewhere, the statement that checks it also reads the first page and asks the
        # process running it to write its events as they come: a live resume waits after two statements (this
        # one and a re-read) instead of five, and a finished run replays in one instead of two.
        first = await self._store.page(
            ctx, session_id, run_id, after=after, limit=0 if local is not None else _READ_BATCH, ask_live=local is None
        )
        if first is None:
            raise run_not_found(run_id)
        if first.state.events_expired:
            raise EventsExpiredError(f"the events of run {run_id} are past their retention and were deleted")
        if local is not None:
            return local.follow(after)
        return self._follow_stored(ctx, session_id, run_id, after, first)

    async def _follow_stored(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, after: int, page: RunLogPage
    ) -> AsyncIterator[LoggedEvent]:
        # Registered here, not before the first page was read: a stream that is never iterated must not leave
        # its waiter behind. So it reads once more before it first waits: a notification that came in between
        # is not lost.
        wake = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(wake)
        try:
            position, read_since_registered = after, False
            while True:
                for event in page.events:
                    yield event
                    position = event.seq
                    if event.terminal:
                        return
                if len(page.events) < _READ_BATCH:
                    # The page and the run's state are one snapshot: a complete log with nothing more is the end
                    # (the client saw the terminal event already, or the run predates the log).
                    if page.state.log_complete:
                        return
                    if read_since_registered:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(wake.wait(), _POLL_SECONDS)
                wake.clear()  # before reading: a notification that comes while we read is not lost
                read_since_registered = True
                next_page = await self._store.page(ctx, session_id, run_id, after=position, limit=_READ_BATCH)
                if next_page is None:
                    return  # deleted meanwhile
                page = next_page
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[run_id]

    # -- LISTEN --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._dsn is not None and self._listening is None:
            self._listening = asyncio.create_task(self._listen(self._dsn), name="run-events-listener")

    async def stop(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
            self._listening = None

    async def _listen(self, dsn: str) -> None:
        # Whatever ends one connection (the server going away at any step included), the next is tried: a task
        # that died here would leave followers on other replicas polling, and cancels unheard, until a restart.
        while True:
            try:
                await self._listen_once(dsn)
            except Exception as exc:
                # An outage says so once a second; a traceback only for what is not one.
                log.warning("run events: cannot LISTEN; followers poll meanwhile", exc_info=not is_unavailable(exc))
            await asyncio.sleep(_RECONNECT_SECONDS)

    async def _listen_once(self, dsn: str) -> None:
        conn = await asyncpg.connect(dsn, timeout=self._connect_timeout)
        lost = asyncio.Event()
        try:
            conn.add_termination_listener(functools.partial(_set_on_close, lost))
            await conn.add_listener(EVENTS_CHANNEL, self._on_events)
            await conn.add_listener(CONTROL_CHANNEL, self._on_control)
            self._wake_everyone()  # whatever was notified while we were not listening
            await lost.wait()
            log.warning("run events: the LISTEN connection dropped; reconnecting")
        finally:
            # Not close(): it waits for a server that may be gone.
            conn.terminate()

    def _wake_everyone(self) -> None:
        for waiters in self._waiters.values():
            for wake in waiters:
                wake.set()

    def _on_events(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            for wake in self._waiters.get(UUID(payload), ()):
                wake.set()

    def _on_control(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        action, _, raw_id = payload.partition(":")
        try:
            run_id = UUID(raw_id)
        except ValueError:
            return
        if action == "follow":
            run_log = self._logs.get(run_id)
            if run_log is not None:
                run_log.go_live()
        elif action == "cancel":
            self._on_cancel(run_id)
