"""One run in this process: what it needs, how it is stopped from outside, and its handle for the HTTP layer."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.runs.agui.mapper import AguiStream
from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.events.log import RunEventLog
from agent_runtime.engine.runs.ledger.finish import RunFailure
from agent_runtime.engine.runs.ledger.reservation import RunHold
from agent_runtime.engine.runs.ledger.store import HeldRun, StartedRun
from agent_runtime.engine.runs.request.plan import TurnPlan
from agent_runtime.engine.runs.turn.runner import TurnJob

if TYPE_CHECKING:
    from agent_runtime.engine.runs.gateway.gateway import RunGateway


# A stopped run's wait for its cancelled model calls (they record what they were billed): a bound, not a delay.
SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class Started:
    run: StartedRun
    # The plan the start statement took the session's pending turn for (request/plan.py).
    plan: TurnPlan


@dataclass(frozen=True)
class RunHandle:
    session_id: UUID
    run_id: UUID
    events: AguiStream


@dataclass
class RunJob:
    ctx: RequestContext
    started: StartedRun
    # What the turn needs (its input, plan and event emitters: turn/runner.py).
    turn: TurnJob
    # The run's event log (where its AG-UI events go: agui_mapper.AguiStream.publish).
    log: RunEventLog
    task: asyncio.Task[None] | None = None
    # Set before the task is cancelled from outside: what the run's RUN_ERROR says.
    stop_reason: RunFailure | None = None
    # Once the end is being written, nothing cancels the run any more (the write would be torn).
    ending: bool = False
    route: str | None = field(default=None)
    # Set once the flow's gateway exists: what of the answer the client has seen (for a cancelled run).
    gateway: RunGateway | None = None
    # Its budget hold, which also keeps the estimate of what its calls cost so far (renewed with the lease).
    hold: RunHold | None = None

    @property
    def session_id(self) -> UUID:
        return self.started.session.id

    @property
    def run_id(self) -> UUID:
        return self.started.run_id

    @property
    def events(self) -> RunEvents:
        return self.turn.events

    def held(self) -> HeldRun:
        sent = self.hold.sent if self.hold is not None else Decimal(0)
        return HeldRun(session_id=self.session_id, user_id=self.ctx.user_id, run_id=self.run_id, sent_cny=sent)

    def stop(self, reason: RunFailure) -> bool:
        """Cancel the run with `reason`; False when it is over or already writing its end."""
        if self.task is not None and not self.task.done() and not self.ending:
            self.stop_reason = reason
            self.task.cancel()
            return True
        return False


def process_owner_id() -> str:
    """This process's name on the leases it holds (host, pid, and a nonce: pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"
