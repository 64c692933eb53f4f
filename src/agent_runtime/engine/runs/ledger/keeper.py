"""The process's lease keeper: one task renews the leases of this process's runs and sweeps expired ones
(and, in the same round, ends the event logs a dead process left open and deletes events past retention).

A running session carries `lease_owner` and `lease_expires_at` (migrations/0003). This process renews all
of its runs' leases in one statement every RUN_HEARTBEAT_SECONDS; every RUN_SWEEP_SECONDS it takes over the runs
of dead processes it has room for (engine/runs/takeover/), then fails, in one statement, the runs whose lease expired
and that no process may take over (`run_lost`). After a `kill -9`, a run goes on elsewhere within RUN_LEASE_SECONDS +
RUN_SWEEP_SECONDS.

A run of ours whose lease was not renewed (the loop stalled past the lease, the database was away) has
lost its session: another replica may already have failed it. `on_lost` tells the run service, which
stops that run rather than let it write a result nobody may see, and says which it stopped (a run already
writing its end is not: it was not renewed because it had just finished, or its end is refused anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from uuid import UUID

from agent_runtime.db.outage import is_unavailable
from agent_runtime.engine.runs.ledger.store import HeldRun, RunStore
from agent_runtime.observability import metrics

log = logging.getLogger(__name__)

# A finished run's process writes its log's terminal event within milliseconds; past this, it died first.
_LOG_REPAIR_GRACE_SECONDS = 10.0


class LeaseKeeper:
    def __init__(
        self,
        store: RunStore,
        *,
        heartbeat_seconds: float,
        sweep_seconds: float,
        events_retention_seconds: float,
        held: Callable[[], list[HeldRun]],
        on_lost: Callable[[set[UUID]], set[UUID]],
        on_cancel: Callable[[set[UUID]], None],
        take_over: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`take_over`: claims runs of dead processes this one has room for (engine/runs/takeover/), before each
        sweep fails what is left."""
        self._store = store
        self._heartbeat = heartbeat_seconds
        self._sweep_every = sweep_seconds
        self._retention = events_retention_seconds
        self._held = held
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._take_over = take_over
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="lease-keeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_renew = loop.time() + self._heartbeat
        next_sweep = loop.time()  # at start-up too: runs a crashed predecessor left behind
        while True:
            now = loop.time()
            if now >= next_sweep:
                if self._take_over is not None:
                    await self._guarded(self._take_over, "takeover")
                await self._guarded(self.sweep_once, "sweep")
                next_sweep = now + self._sweep_every
            if now >= next_renew:
                await self._guarded(self.renew_once, "lease renewal")
                next_renew = now + self._heartbeat
            await asyncio.sleep(max(0.0, min(next_renew, next_sweep) - loop.time()))

    @staticmethod
    async def _guarded(step: Callable[[], Awaitable[None]], what: str) -> None:
        try:
            await step()
        except Exception as exc:
            # The database may be away for a moment; the next round tries again. A run whose lease expires
            # meanwhile is failed by whichever process sweeps first once it is back. An outage is one line a round.
            log.warning("%s failed; retrying at the next interval", what, exc_info=not is_unavailable(exc))

    async def renew_once(self) -> None:
        held = self._held()
        if not held:
            return
        renewed = await self._store.renew(held)
        if renewed.cancel_requested:
            self._on_cancel(renewed.cancel_requested)
        lost = {run.run_id for run in held} - renewed.kept
        # A run that finished while the statement ran is not renewed either: only those still running count.
        stopped = self._on_lost(lost) if lost else set()
        if stopped:
            log.error("runs lost their lease", extra={"run_ids": sorted(str(r) for r in stopped)})

    async def sweep_once(self) -> None:
        lost = await self._store.sweep()
        for run in lost:
            log.error(
                "run lost: its process stopped renewing the lease",
                extra={
                    "run_id": str(run.run_id),
                    "session_id": str(run.session_id),
                    "error_id": run.error_id,
                    "code": "run_lost",
                },
            )
        if lost:
            metrics.runs_lost(len(lost))
            self._on_lost({run.run_id for run in lost})
        repaired = await self._store.repair_logs(grace_seconds=_LOG_REPAIR_GRACE_SECONDS)
        if repaired:
            log.warning("ended the event logs of finished runs whose process died", extra={"runs": repaired})
        await self._store.expire_events(retention_seconds=self._retention)
