"""This process's side of runs that survive their replica (engine/runs/takeover/): it claims the runs of dead
processes it has room for and goes on with each (the lease keeper's sweep calls `take_over`), and at a drain it hands
the runs it could not finish over to the next replica's sweep (`hand_over`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from agent_runtime.db.outage import is_unavailable
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.flow.model_call import IntentDecided
from agent_runtime.engine.flow.tools.grants import ToolGrants
from agent_runtime.engine.runs.admission import Admission
from agent_runtime.engine.runs.agui.mapper import AguiStream, to_agui
from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.events.hub import RunEventHub
from agent_runtime.engine.runs.events.log import RunEventLog
from agent_runtime.engine.runs.events.types import RunFailed
from agent_runtime.engine.runs.gateway.recorder import RunRecorder
from agent_runtime.engine.runs.job import SETTLE_SECONDS, RunJob
from agent_runtime.engine.runs.ledger.finish import HANDED_OVER
from agent_runtime.engine.runs.ledger.store import StartedRun
from agent_runtime.engine.runs.request.models import RunInput
from agent_runtime.engine.runs.request.plan import TurnPlan
from agent_runtime.engine.runs.takeover.decisions import takeover_decisions
from agent_runtime.engine.runs.takeover.store import ClaimedRun, TakeoverStore
from agent_runtime.engine.runs.turn.thread_view import visible_thread
from agent_runtime.observability import metrics

log = logging.getLogger(__name__)

# A handover's statements when the drain's grace is over: bounded, the process is on its way out.
HAND_OVER_SECONDS = 1.0


class Launch(Protocol):
    """Starts a run's task in this process (RunService._launch)."""

    def __call__(
        self,
        ctx: RequestContext,
        started: StartedRun,
        run_input: RunInput,
        plan: TurnPlan,
        events: RunEvents,
        log: RunEventLog,
        *,
        resumes: IntentDecided | None,
    ) -> None: ...


class Takeovers:
    def __init__(
        self,
        store: TakeoverStore,
        *,
        most_takeovers: int,
        admission: Admission,
        messages: MessageStore,
        hub: RunEventHub,
        grants: Callable[[], ToolGrants],
        launch: Launch,
    ) -> None:
        """`grants`: the tools runs get now (a reload of TOOLS_FILE changes them)."""
        self.store = store
        self._most = most_takeovers
        self._admission = admission
        self._messages = messages
        self._hub = hub
        self._grants = grants
        self._launch = launch

    async def take_over(self) -> None:
        """Claim the runs of dead processes this one has room for, and go on with each from its last stored step."""
        admission = self._admission
        room = 0 if admission.draining else admission.limit - admission.in_flight
        for claimed in await self.store.claim(room, most_takeovers=self._most):
            admission.take()
            try:
                await self._resume(claimed)
            except BaseException:
                admission.release()
                raise

    async def _resume(self, claimed: ClaimedRun) -> None:
        ctx, run_input = claimed.ctx, claimed.run_input
        decisions = []
        if claimed.resumes is not None:
            grants = self._grants()
            thread = await visible_thread(self._messages, ctx, claimed.session.id)
            decisions = takeover_decisions(thread, run_input, grants.by_name, approval=grants.requiring_approval)
        event_log = self._hub.open_log(claimed.run_id, ctx.user_id, after=claimed.first_event_seq)
        event_log.go_live()  # its client is likely reconnecting, on any replica
        thread_id, run_id = str(claimed.session.id), str(claimed.run_id)
        stream = AguiStream(thread_id=thread_id, run_id=run_id, log=event_log, legacy=run_input.legacy)
        events = RunEvents(stream.emit)
        stream.handed_over(claimed.takeovers)
        events.run_started()
        events.notice("run_resumed", {"takeover": claimed.takeovers, "from_intent": claimed.resumes is not None})
        plan = TurnPlan(pending=None, continues=False, decisions=decisions, closing_results=[])
        log_extra = {"run_id": run_id, "session_id": thread_id, "takeover": claimed.takeovers}
        log.warning("run taken over from a process that stopped renewing its lease", extra=log_extra)
        metrics.run_taken_over("start" if claimed.resumes is None else "intent")
        self._launch(ctx, claimed.started(), run_input, plan, events, stream.log, resumes=claimed.resumes)

    def may_hand_over(self, job: RunJob) -> bool:
        return job.started.takeovers < self._most

    async def hand_over(self, job: RunJob, recorder: RunRecorder) -> None:
        """The drain's grace is over: store the tool results the run has, release its lease at once for another
        replica's next sweep to take it over, with the estimate of what it sent (charged there, once), and end
        this connection's stream; the run's stored log goes on on that replica."""
        if job.gateway is not None:
            await job.gateway.settled(SETTLE_SECONDS)
        try:
            async with asyncio.timeout(HAND_OVER_SECONDS):
                await recorder.flush_tool_results()
                await self.store.release(job.ctx, job.started, sent=job.held().sent_cny)
        except Exception as exc:
            # Its lease runs out by itself: the run is taken over a lease later.
            log.warning("could not hand the run over at once", exc_info=not is_unavailable(exc))
        failed = RunFailed(code=HANDED_OVER.code, message=f"{HANDED_OVER.message} (run {job.run_id})")
        legacy = job.turn.run_input.legacy
        for event in to_agui(failed, thread_id=str(job.session_id), run_id=str(job.run_id), legacy=legacy):
            job.log.append(event, ends=True, stored=False)
        log.info("run handed over", extra={"run_id": str(job.run_id), "session_id": str(job.session_id)})
