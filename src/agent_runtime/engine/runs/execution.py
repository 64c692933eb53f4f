"""A started run in the background (RunService launches it): its turn, then its end: completed, cancelled (the
answer as far as it was streamed kept), handed over to another replica, or failed (RUN_ERROR, rows kept)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from uuid import UUID, uuid4

from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.llm.models import CallOptions
from agent_runtime.engine.runs.admission import Admission
from agent_runtime.engine.runs.events.hub import RunEventHub
from agent_runtime.engine.runs.gateway.recorder import RunRecorder
from agent_runtime.engine.runs.job import SETTLE_SECONDS, RunJob
from agent_runtime.engine.runs.ledger.finish import CANCELLED, HANDED_OVER, RunEnding, RunFailure
from agent_runtime.engine.runs.ledger.reservation import RunHold, RunReservation
from agent_runtime.engine.runs.ledger.store import RunEnd, RunStore
from agent_runtime.engine.runs.takeovers import Takeovers
from agent_runtime.engine.runs.turn.runner import TurnResult, TurnRunner
from agent_runtime.observability import runs as observability
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)


class RunExecution:
    def __init__(
        self,
        settings: Settings,
        messages: MessageStore,
        turns: TurnRunner,
        *,
        store: RunStore,
        reservation: RunReservation,
        stage_options: dict[str, CallOptions],
        admission: Admission,
        hub: RunEventHub,
        takeovers: Takeovers,
        jobs: dict[UUID, RunJob],
        warm: Callable[[], asyncio.Task[None]],
    ) -> None:
        """`jobs`: the service's runs in flight, which a run leaves when it ends; `warm`: the warm-up every run
        awaits (the models' imports)."""
        self._settings = settings
        self._messages = messages
        self._turns = turns
        self.store = store
        self._reservation = reservation
        self._stage_options = stage_options
        self.admission = admission
        self.hub = hub
        self.takeovers = takeovers
        self._jobs = jobs
        self._warm = warm
        self._ending = RunEnding(store, deadline_seconds=settings.run_lease_seconds)

    async def run(self, job: RunJob) -> None:
        run_id = str(job.run_id)
        recorder = RunRecorder(self._messages, job.ctx, job.session_id, run_id)
        observability.run_began(run_id, str(job.session_id))
        log.info("run started", extra={"run_id": run_id, "session_id": str(job.session_id)})
        try:
            try:
                async with asyncio.timeout(self._settings.run_timeout_seconds):
                    await self.admission.after_starts()
                    await self._turns.snapshots(job.turn)
                    await asyncio.shield(self._warm())
                    job.hold = RunHold(self.store, self._reservation, job.ctx, job.started)
                    job.gateway = self._turns.gateway(job.turn, recorder, self._stage_options, job.hold)
                    result = await self._turns.run(job.turn, job.gateway, recorder)
            except BaseException as exc:
                if job.stop_reason is CANCELLED:
                    observability.run_cancelled()
                    await self._cancelled(job, recorder)
                    return
                if job.stop_reason is HANDED_OVER:
                    observability.run_handed_over()
                    await self.takeovers.hand_over(job, recorder)
                    return
                failure = job.stop_reason or RunFailure.of(exc)
                if job.gateway is not None:
                    await job.gateway.settled(SETTLE_SECONDS)
                await self._fail(job, failure, recorder.failed_rows(f"{failure.code}: {failure.message}"), exc)
                if not isinstance(exc, Exception) and job.stop_reason is None:
                    raise  # cancelled by someone who did not say why (e.g. the loop closing): stay cancelled
                return
            job.ending = True
            job.route = result.route
            waiting = result.waiting.model_dump(mode="json") if result.waiting is not None else None
            end = await self._ending.record(job.ctx, job.started, "completed", result.rows, waiting=waiting)
            if isinstance(end, RunFailure):
                # The rows could not be stored (logged with the cause): record at least the failure.
                await self._fail(job, end, [], None)
                return
            observability.run_completed()
            await self._announce(job, end, result)
            self._turns.remember(job.turn, result)  # long-term memories, in the background
        finally:
            self._jobs.pop(job.run_id, None)
            self.admission.release()
            await self.hub.close_log(job.log)

    async def _cancelled(self, job: RunJob, recorder: RunRecorder) -> None:
        """The user stopped the run: keep what it produced (the answer as far as it was streamed, marked
        partial), record it completed (run status `cancelled`), and finish with outcome `cancelled`."""
        job.ending = True
        if (gateway := job.gateway) is not None:
            await gateway.settled(SETTLE_SECONDS)
        answer, message_id = (gateway.streamed_answer, gateway.answer_message_id) if gateway else ("", str(uuid4()))
        rows = recorder.cancelled_rows(answer_text=answer, message_id=message_id, demo=self._settings.is_demo_model)
        end = await self._ending.record(job.ctx, job.started, "completed", rows, run_status="cancelled")
        log.info("run cancelled", extra={"run_id": str(job.run_id), "session_id": str(job.session_id)})
        if isinstance(end, RunFailure):
            await self._fail(job, end, [], None)
            return
        await self._announce(job, end, TurnResult(rows=[], route=job.route), cancelled=True)

    async def _announce(self, job: RunJob, end: RunEnd, result: TurnResult, *, cancelled: bool = False) -> None:
        if result.answer_message_id is not None:
            try:
                await self._turns.retract_unstored_text(job.turn, keep=result.answer_message_id)
            except Exception:
                log.exception("could not send the run's messages snapshot", extra={"run_id": str(job.run_id)})
        self._turns.finished(job.turn, end.totals, result, cancelled=cancelled)
        log.info("run completed", extra={"run_id": str(job.run_id), "route": job.route, "cost": str(end.totals.cost)})

    async def _fail(self, job: RunJob, failure: RunFailure, rows: list[NewMessage], exc: BaseException | None) -> None:
        error_id = uuid4().hex
        observability.run_failed(failure.code, error_id)
        log.error(
            "run failed",
            exc_info=exc if failure.code == "internal_error" else None,
            extra={
                "run_id": str(job.run_id),
                "session_id": str(job.session_id),
                "error_id": error_id,
                "code": failure.code,
                "reason": failure.message,
            },
        )
        job.ending = True
        try:
            await self._ending.record(job.ctx, job.started, "failed", rows, error_code=failure.code, error_id=error_id)
            await self._turns.retract_unstored_text(job.turn, keep=None)
        except Exception:
            log.exception("could not send the failed run's messages snapshot", extra={"run_id": str(job.run_id)})
        finally:
            job.turn.state.update(status="failed")
            job.events.run_error(code=failure.code, message=f"{failure.message} (error_id {error_id})")
