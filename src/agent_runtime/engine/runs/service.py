"""Runs: admitted, started atomically under a lease, executed in the background, streamed as AG-UI events.

A run's life (README "Runs under load"):
1. Admission, before anything else: this process's MAX_CONCURRENT_RUNS (`admission.py`, 429 `server_busy`,
   503 `shutting_down` while draining); then one statement (`store.py`) moves the session to `running`
   under this process's lease, checks the user's limit (429 `too_many_runs`, enforced by the database on
   every replica) and stores the input messages. Nothing starts streaming unless all of it passed.
2. The flow runs in its own task, not in the HTTP response: a client that disconnects does not stop it,
   and the answer is still stored. The CrewAI part runs on the bounded threads of `flow/threads.py`.
3. The end is one statement (rows, status, totals), retried on database errors; if it never gets through,
   the lease expires and any replica's sweep records the run as lost (`leases.py`).
4. Shutdown (`drain`): readiness and new runs are refused at once; runs in flight get
   SHUTDOWN_GRACE_SECONDS, then end with RUN_ERROR `run_interrupted` in their stream (and a failed
   session with the same error_id) before their connection closes.
5. Every event goes into the run's event log (`event_log.py`, `event_hub.py`): numbered, stored, and
   followed from any replica; a cancel (`cancel`) reaches the run wherever it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

import asyncpg
from ag_ui.core import RunAgentInput, TokenUsage

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import RunInProgressError, ValidationFailedError
from agent_runtime.engine.flow.crewai_env import configure_crewai_env
from agent_runtime.engine.flow.prompt import build_global_system_prompt
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.threads import FlowThreads
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.memory.messages import ChatMetadata, UserMessage
from agent_runtime.engine.memory.postgres import to_new_message
from agent_runtime.engine.memory.run_memory import run_history
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.messages.store import MessageStore
from agent_runtime.engine.profiles.models import UserAgentContext
from agent_runtime.engine.runs.admission import Admission
from agent_runtime.engine.runs.agui_input import run_input_from_agui, thread_session_id
from agent_runtime.engine.runs.event_hub import RunEventHub, run_not_found
from agent_runtime.engine.runs.event_log import LoggedEvent
from agent_runtime.engine.runs.event_store import EventStore
from agent_runtime.engine.runs.events import RunEvents
from agent_runtime.engine.runs.finish import CANCELLED, RunEnding, RunFailure
from agent_runtime.engine.runs.job import RunHandle, RunJob, Started, process_owner_id, user_input
from agent_runtime.engine.runs.leases import LeaseKeeper
from agent_runtime.engine.runs.models import RunInput
from agent_runtime.engine.runs.recorder import RunRecorder
from agent_runtime.engine.runs.store import RunEnd, RunIdTakenError, RunStore
from agent_runtime.engine.runs.warmup import Warmup
from agent_runtime.engine.sessions.service import SessionService
from agent_runtime.engine.usage.models import UsageTotals
from agent_runtime.observability import runs as observability
from agent_runtime.settings import Settings

if TYPE_CHECKING:
    from agent_runtime.engine.runs.gateway import RunGateway

log = logging.getLogger(__name__)


class RunService:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        sessions: SessionService,
        messages: MessageStore,
        templates: FlowTemplates,
        *,
        dsn: str | None = None,
    ) -> None:
        """`dsn`: for the connection that LISTENs for run events and controls; without it (tests of the engine
        alone) followers of other processes' runs poll the stored log."""
        self._settings = settings
        self._pool = pool
        self._sessions = sessions
        self._messages = messages
        self._templates = templates
        self._warmup = Warmup(settings)
        self._jobs: dict[UUID, RunJob] = {}
        # Every run task until it is done (a run leaves `_jobs` a moment earlier, before its log's last write).
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        self.admission = Admission(settings.max_concurrent_runs)
        self.store = RunStore(pool, owner=process_owner_id(), lease_seconds=settings.run_lease_seconds)
        self._threads = FlowThreads(settings.max_concurrent_runs)
        self._ending = RunEnding(self.store, deadline_seconds=settings.run_lease_seconds)
        self.leases = LeaseKeeper(
            self.store,
            heartbeat_seconds=settings.run_heartbeat_seconds,
            sweep_seconds=settings.run_sweep_seconds,
            events_retention_seconds=settings.run_events_retention_seconds,
            held=lambda: [job.held() for job in self._jobs.values()],
            on_lost=self._lost,
            on_cancel=self._cancel_requested,
        )
        self.events = EventStore(pool)
        self.hub = RunEventHub(self.events, dsn=dsn, on_cancel=self._cancel_requested)
        configure_crewai_env(settings.data_dir)

    def _client(self) -> LLMClient:
        return self._warmup.client()

    @property
    def warm(self) -> bool:
        return self._warmup.done

    def ensure_warm(self) -> asyncio.Task[None]:
        """The one warm-up task (started on first call): start-up kicks it off, every run awaits it."""
        return self._warmup.ensure()

    # -- start ---------------------------------------------------------------------------------------

    async def start(self, ctx: RequestContext, session_id: UUID, run_input: RunInput) -> RunHandle:
        *_, last = run_input.new_messages
        if not isinstance(last, UserMessage):
            raise ValidationFailedError("the last new message of a run must be a user message")
        self.admission.admit()
        try:
            admitted = await self._start_in_db(ctx, session_id, run_input)
        except BaseException:
            self.admission.release()
            raise
        started = admitted.run
        run_log = self.hub.open_log(started.run_id, ctx.user_id)
        events = RunEvents(thread_id=str(session_id), run_id=str(started.run_id), log=run_log)
        events.run_started()
        user_message = admitted.messages[-1]
        assert isinstance(user_message, UserMessage)
        job = RunJob(ctx, started, user_message, run_input.context, events)
        self._jobs[started.run_id] = job
        job.task = asyncio.create_task(self._execute(job), name=f"run-{started.run_id}")
        self._tasks.add(job.task)
        job.task.add_done_callback(self._tasks.discard)
        return RunHandle(session_id=session_id, run_id=started.run_id, events=events)

    async def _start_in_db(self, ctx: RequestContext, session_id: UUID, run_input: RunInput) -> Started:
        run_id = run_input.run_id or uuid4()
        swept = False
        while True:
            stamped = [
                m.model_copy(update={"metadata": ChatMetadata(run_id=str(run_id))}) for m in run_input.new_messages
            ]
            try:
                started = await self.store.start(ctx, session_id, run_id, [to_new_message(m) for m in stamped])
            except RunIdTakenError:
                # A reused client run id would merge two runs' rows (and costs); such a run gets its own id.
                run_id = uuid4()
                continue
            if started is not None:
                return Started(run=started, messages=stamped)
            if swept:
                raise RunInProgressError(f"session {session_id} already has a run in progress")
            # Its run may be one whose process died and whose lease expired since the last sweep.
            swept = True
            await self.leases.sweep_once()

    async def start_agui(self, ctx: RequestContext, agui_input: RunAgentInput) -> RunHandle:
        """AG-UI entry: the thread is the caller's session (created on first use); only messages not
        stored yet (matched by id) are appended, and the run answers the last of them."""
        session_id = thread_session_id(agui_input)
        ids = [m.id for m in agui_input.messages]
        # Owner-scoped: empty for a thread that does not exist yet (or is someone else's).
        stored = await self._messages.existing_message_ids(ctx, session_id, ids) if ids else set()
        run_input = run_input_from_agui(agui_input, stored)
        # Only once the input is known to be valid: a refused request must not leave a new session behind.
        await self._sessions.ensure(ctx, session_id)
        return await self.start(ctx, session_id, run_input)

    # -- execute -------------------------------------------------------------------------------------

    async def _execute(self, job: RunJob) -> None:
        run_id = str(job.run_id)
        recorder = RunRecorder(self._messages, job.ctx, job.session_id, run_id)
        observability.run_began(run_id, str(job.session_id))
        log.info("run started", extra={"run_id": run_id, "session_id": str(job.session_id)})
        try:
            try:
                async with asyncio.timeout(self._settings.run_timeout_seconds):
                    await asyncio.shield(self.ensure_warm())
                    # Imported after the warm-up: the gateway needs CrewAI-side types, which load in seconds.
                    from agent_runtime.engine.runs.gateway import RunGateway

                    model = self._settings.effective_llm_model
                    job.gateway = RunGateway(
                        self._client(), job.events, recorder, answer_message_id=str(uuid4()), model=model
                    )
                    rows = await self._run_flow(job, job.gateway, recorder)
            except BaseException as exc:
                if job.stop_reason is CANCELLED:
                    observability.run_cancelled()
                    await self._cancelled(job, recorder)
                    return
                failure = job.stop_reason or RunFailure.of(exc)
                await self._fail(job, failure, recorder.failed_rows(f"{failure.code}: {failure.message}"), exc)
                if not isinstance(exc, Exception) and job.stop_reason is None:
                    raise  # cancelled by someone who did not say why (e.g. the loop closing): stay cancelled
                return
            job.ending = True
            end = await self._ending.record(job.ctx, job.started, "completed", rows)
            if end is None:
                # The rows could not be stored (logged with the cause): record at least the failure.
                lost = RunFailure("internal_error", "the run's result could not be stored")
                await self._fail(job, lost, [], None)
                return
            observability.run_completed()
            self._announce(job, end)
        finally:
            self._jobs.pop(job.run_id, None)
            self.admission.release()
            await self.hub.close_log(job.events.log)

    async def _cancelled(self, job: RunJob, recorder: RunRecorder) -> None:
        """The user stopped the run: keep what it produced (the answer as far as it was streamed, marked
        partial), record it completed (run status `cancelled`), and finish with outcome `cancelled`."""
        job.ending = True
        gateway = job.gateway
        rows = recorder.cancelled_rows(
            answer_text=gateway.streamed_answer if gateway is not None else "",
            message_id=gateway.answer_message_id if gateway is not None else str(uuid4()),
            demo=self._settings.is_demo_model,
        )
        end = await self._ending.record(job.ctx, job.started, "completed", rows, run_status="cancelled")
        log.info("run cancelled", extra={"run_id": str(job.run_id), "session_id": str(job.session_id)})
        if end is None:
            await self._fail(job, RunFailure("internal_error", "the cancelled run could not be stored"), [], None)
            return
        self._announce(job, end, cancelled=True)

    async def _run_flow(self, job: RunJob, gateway: RunGateway, recorder: RunRecorder) -> list[NewMessage]:
        from agent_runtime.engine.flow.crew_flow import FlowDeps, build_state, run_agent_flow

        profile = job.started.profile
        agent_ctx = UserAgentContext(
            user_id=profile.user_id, username=profile.username, bio=profile.bio, settings=profile.settings
        )
        system_prompt = build_global_system_prompt(agent_ctx)
        # The session's memory window (engine/memory/run_memory.py): one statement, plus a summary call at a cut.
        history = await run_history(
            settings=self._settings,
            pool=self._pool,
            ctx=job.ctx,
            session_id=job.session_id,
            run_id=str(job.run_id),
            current_message_id=job.user_message.id,
            system_prompt=system_prompt,
            llm=self._client(),
            task=self._templates,
            record=recorder.queue_row,
        )
        state = build_state(
            system_prompt=system_prompt,
            history=history,
            user_input=user_input(job.user_message, job.context),
            ai_language=agent_ctx.settings.preferences.ai_language,
        )
        deps = FlowDeps(
            call_model=gateway,
            model=self._settings.effective_llm_model,
            templates=self._templates,
            user_context=agent_ctx,
            sink=gateway.sink,
            max_json_retries=self._settings.stage_max_json_retries,
            threads=self._threads,
        )
        final = await run_agent_flow(state, deps)
        job.route = final.route
        answer_stage = "intent" if final.route == "DIRECT_EXECUTION" else "organization"
        answer = final.assistant_text or ""
        gateway.stream_rest_of_answer(answer)
        gateway.finish_stage()
        return recorder.completed_rows(
            answer_stage=answer_stage,
            answer_text=answer,
            message_id=gateway.answer_message_id,
            demo=self._settings.is_demo_model,
        )

    def _announce(self, job: RunJob, end: RunEnd, *, cancelled: bool = False) -> None:
        totals: UsageTotals = end.totals
        model = self._settings.effective_llm_model
        job.events.custom(
            "run_cost",
            {
                "currency": totals.currency,
                "cost": format(totals.cost, "f"),
                "inputTokens": totals.input_tokens,
                "outputTokens": totals.output_tokens,
                "cachedInputTokens": totals.cached_tokens,
                "modelCalls": totals.model_calls,
                "demo": self._settings.is_demo_model,
            },
        )
        usage = TokenUsage(
            provider=model.split("/", 1)[0],
            model=model,
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            total_tokens=totals.input_tokens + totals.output_tokens,
            cached_input_tokens=totals.cached_tokens,
        )
        job.events.run_finished(usage=[usage], cancelled=cancelled)
        log.info("run completed", extra={"run_id": str(job.run_id), "route": job.route, "cost": str(totals.cost)})

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
        finally:
            job.events.run_error(code=failure.code, message=f"{failure.message} (error_id {error_id})")

    # -- process life --------------------------------------------------------------------------------

    def start_background(self) -> None:
        """Start the lease keeper (renewals and sweeps); the lifespan calls it once, on the app's loop."""
        self._loop = asyncio.get_running_loop()
        self.leases.start()
        self.hub.start()

    def request_drain(self) -> None:
        """Start draining on the app's loop; safe from a signal handler or another thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        self.admission.draining = True
        if self._draining is None:
            self._draining = asyncio.create_task(self.drain(), name="drain")

    async def follow(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, *, after: int
    ) -> AsyncIterator[LoggedEvent]:
        """A run's events after seq `after`, to its terminal event, wherever the run runs (see event_hub)."""
        return await self.hub.follow(ctx, session_id, run_id, after=after)

    async def cancel(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> str:
        """Stop the run wherever it runs (idempotent); returns its status as stored now."""
        status = await self.events.request_cancel(ctx, session_id, run_id)
        if status is None:
            raise run_not_found(run_id)
        # Here at once when it runs here; elsewhere its process hears the NOTIFY (or its next heartbeat).
        self._cancel_requested({run_id})
        return status

    def _cancel_requested(self, run_ids: set[UUID] | UUID) -> None:
        for run_id in run_ids if isinstance(run_ids, set) else {run_ids}:
            job = self._jobs.get(run_id)
            if job is not None:
                job.stop(CANCELLED)

    def _lost(self, run_ids: set[UUID]) -> None:
        for run_id in run_ids:
            job = self._jobs.get(run_id)
            if job is not None:
                job.stop(RunFailure("run_lost", "the run lost its lease on the session (it was taken over)"))

    async def drain(self) -> None:
        """Refuse new runs; give runs in flight SHUTDOWN_GRACE_SECONDS; end the rest with `run_interrupted`.

        Idempotent: the server calls it when the shutdown signal arrives (while the streams are still open,
        so their RUN_ERROR reaches the clients), the lifespan again at the end.
        """
        self.admission.draining = True
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._settings.shutdown_grace_seconds)
        interrupted = RunFailure("run_interrupted", "the server shut down before the run finished")
        for job in list(self._jobs.values()):
            job.stop(interrupted)
        if pending:
            # Their failure is written in one statement each; a database that does not answer leaves them
            # to the sweep of another replica (their leases expire).
            await asyncio.wait(pending, timeout=5)

    async def wait_idle(self) -> None:
        """Until no run is in flight, their logs written included (tests and benchmarks)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def aclose(self) -> None:
        await (self._draining if self._draining is not None else self.drain())
        await self.leases.stop()
        await self.hub.stop()
        self._threads.shutdown()
