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
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
from dataclasses import dataclass, field
from uuid import UUID, uuid4

import asyncpg
from ag_ui.core import RunAgentInput

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import RunInProgressError
from agent_runtime.engine.flow.crewai_env import configure_crewai_env
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.threads import FlowThreads
from agent_runtime.engine.flow.tools import engine_tools
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.memory.tokens import litellm_token_counter
from agent_runtime.engine.messages.models import NewMessage
from agent_runtime.engine.messages.store import MessageStore
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.runs.admission import Admission
from agent_runtime.engine.runs.agui_input import read_agui_input
from agent_runtime.engine.runs.agui_mapper import AguiStream
from agent_runtime.engine.runs.events import RunEvents
from agent_runtime.engine.runs.finish import RunEnding, RunFailure
from agent_runtime.engine.runs.leases import LeaseKeeper
from agent_runtime.engine.runs.models import RunInput
from agent_runtime.engine.runs.pending import PendingStore, SessionAguiState
from agent_runtime.engine.runs.recorder import RunRecorder
from agent_runtime.engine.runs.run_state import RunStateTracker
from agent_runtime.engine.runs.store import HeldRun, RunEnd, RunIdTakenError, RunStore, StartedRun
from agent_runtime.engine.runs.turn_input import TokenCounter, check_token_budget, message_token_limit, rows_to_store
from agent_runtime.engine.runs.turn_plan import TurnPlan, plan_turn
from agent_runtime.engine.runs.turn_runner import TurnJob, TurnResult, TurnRunner
from agent_runtime.engine.sessions.service import SessionService
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Started:
    run: StartedRun
    plan: TurnPlan


@dataclass(frozen=True)
class RunHandle:
    session_id: UUID
    run_id: UUID
    events: AguiStream


@dataclass
class _RunJob:
    ctx: RequestContext
    started: StartedRun
    turn: TurnJob
    task: asyncio.Task[None] | None = None
    # Set before the task is cancelled from outside: what the run's RUN_ERROR says.
    stop_reason: RunFailure | None = None
    # Once the end is being written, nothing cancels the run any more (the write would be torn).
    ending: bool = False
    route: str | None = field(default=None)

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
        return HeldRun(session_id=self.session_id, user_id=self.ctx.user_id, run_id=self.run_id)

    def stop(self, reason: RunFailure) -> None:
        if self.task is not None and not self.task.done() and not self.ending:
            self.stop_reason = reason
            self.task.cancel()


def process_owner_id() -> str:
    """This process's name on the leases it holds (host, pid, and a nonce: pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"


class RunService:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        sessions: SessionService,
        messages: MessageStore,
        templates: FlowTemplates,
    ) -> None:
        self._settings = settings
        self._pool = pool
        self._sessions = sessions
        self._messages = messages
        self._templates = templates
        self._llm: LLMClient | None = None
        self._jobs: dict[UUID, _RunJob] = {}
        self._warm: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        self.admission = Admission(settings.max_concurrent_runs)
        self.store = RunStore(pool, owner=process_owner_id(), lease_seconds=settings.run_lease_seconds)
        self._threads = FlowThreads(settings.max_concurrent_runs)
        self._ending = RunEnding(self.store, deadline_seconds=settings.run_lease_seconds)
        self._tools = engine_tools(ProfileService(pool))
        self._tool_map = {name: self._tools.get(name) for name in self._tools.names()}
        self._pending = PendingStore(pool)
        self._turns = TurnRunner(settings, pool, messages, templates, self._tools, self._threads)
        self.leases = LeaseKeeper(
            self.store,
            heartbeat_seconds=settings.run_heartbeat_seconds,
            sweep_seconds=settings.run_sweep_seconds,
            held=lambda: [job.held() for job in self._jobs.values()],
            on_lost=self._lost,
        )
        configure_crewai_env(settings.data_dir)

    def _client(self) -> LLMClient:
        # Built on first use: it imports LiteLLM (seconds of CPU), which `serve` must not wait for.
        if self._llm is None:
            self._llm = LLMClient(self._settings)
        return self._llm

    async def _token_counter(self) -> TokenCounter:
        await asyncio.shield(self.ensure_warm())  # the tokenizer is LiteLLM's, imported by the warm-up
        return litellm_token_counter(self._settings.effective_llm_model)

    def ensure_warm(self) -> asyncio.Task[None]:
        """The one warm-up task (started on first call): start-up kicks it off, every run awaits it."""
        if self._warm is None:
            self._warm = asyncio.create_task(self._warm_up(), name="warm-up")
        return self._warm

    async def _warm_up(self) -> None:
        """Import CrewAI and LiteLLM off the event loop: importing them on it would stall every request
        (and database call) in flight for seconds."""
        from agent_runtime.engine.flow.crewai_env import load_crewai

        # Importing CrewAI and LiteLLM (and building the LLM client, which imports LiteLLM) is blocking CPU
        # work that neither library offers an async way to do; a worker thread keeps the loop serving
        # requests meanwhile (the import lock makes a concurrent first run simply wait).
        await asyncio.to_thread(load_crewai, self._settings.data_dir)
        await asyncio.to_thread(__import__, "agent_runtime.engine.flow.crew_flow")
        await asyncio.to_thread(self._client)
        # The imports leave ~520k long-lived objects, and every full collection scans them all: ~270 ms with
        # every thread stopped, the event loop included. That was the 0.35-0.5 s stall when 20 runs start at
        # once. Freezing moves them out of the collector's sight; they are module-level and never garbage.
        gc.freeze()

    # -- start ---------------------------------------------------------------------------------------

    async def start(self, ctx: RequestContext, session_id: UUID, run_input: RunInput) -> RunHandle:
        # A new turn is planned as if nothing were pending (the start then checks that in its statement);
        # answers to interrupts need to know them first.
        thread = await self._pending.load(ctx, session_id) if run_input.resume else None
        return await self._start(ctx, session_id, run_input, thread)

    async def start_agui(self, ctx: RequestContext, agui_input: RunAgentInput) -> RunHandle:
        """AG-UI entry: the thread is one of the caller's sessions. A thread id that is not the caller's
        session is a 404 whether it exists or not (new threads come from `POST /v1/sessions`), so thread
        ids cannot be probed. Messages already stored (matched by id) are history; see agui_input.py for
        what else is taken."""
        request = await read_agui_input(ctx, agui_input, self._pending, server_tools=self._tools.names())
        return await self._start(ctx, request.session_id, request.run_input, request.thread)

    async def _start(
        self, ctx: RequestContext, session_id: UUID, run_input: RunInput, thread: SessionAguiState | None
    ) -> RunHandle:
        plan = plan_turn(run_input, thread.pending if thread else None, self._tool_map)
        limit = message_token_limit(self._settings.memory_max_tokens)
        await check_token_budget(
            [*run_input.new_messages, *run_input.tool_results], limit=limit, counter=self._token_counter
        )
        self.admission.admit()
        try:
            admitted = await self._start_in_db(ctx, session_id, run_input, plan)
        except BaseException:
            self.admission.release()
            raise
        started = admitted.run
        stream = AguiStream(thread_id=str(session_id), run_id=str(started.run_id))
        events = RunEvents(stream.emit)
        events.run_started()
        if run_input.ignored:
            events.notice("input_ignored", {"messages": [m.model_dump() for m in run_input.ignored]})
        turn = TurnJob(
            ctx=ctx,
            session_id=session_id,
            run_id=started.run_id,
            profile=started.profile,
            run_input=run_input,
            plan=admitted.plan,
            client_state=started.client_state,
            events=events,
            state=RunStateTracker(events, str(started.run_id)),
        )
        job = _RunJob(ctx, started, turn)
        self._jobs[started.run_id] = job
        job.task = asyncio.create_task(self._execute(job), name=f"run-{started.run_id}")
        return RunHandle(session_id=session_id, run_id=started.run_id, events=stream)

    async def _start_in_db(
        self, ctx: RequestContext, session_id: UUID, run_input: RunInput, plan: TurnPlan
    ) -> _Started:
        run_id = run_input.run_id or uuid4()
        swept = False
        while True:
            expected = plan.pending.id if plan.pending is not None else None
            try:
                started = await self.store.start(
                    ctx,
                    session_id,
                    run_id,
                    rows_to_store(run_input, plan, run_id),
                    pending_id=expected,
                    client_state=run_input.client_state,
                )
            except RunIdTakenError:
                # A reused client run id would merge two runs' rows (and costs); such a run gets its own id.
                run_id = uuid4()
                continue
            if started is not None:
                return _Started(run=started, plan=plan)
            thread = await self._pending.load(ctx, session_id)
            if (thread.pending.id if thread.pending else None) != expected:
                # The session waits for something else than planned (approvals, say): plan again, which
                # refuses the run if it does not answer them (409 interrupt_pending).
                plan = plan_turn(run_input, thread.pending, self._tool_map)
                continue
            if swept:
                raise RunInProgressError(f"session {session_id} already has a run in progress")
            # Its run may be one whose process died and whose lease expired since the last sweep.
            swept = True
            await self.leases.sweep_once()

    # -- execute -------------------------------------------------------------------------------------

    async def _execute(self, job: _RunJob) -> None:
        run_id = str(job.run_id)
        recorder = RunRecorder(self._messages, job.ctx, job.session_id, run_id)
        log.info("run started", extra={"run_id": run_id, "session_id": str(job.session_id)})
        try:
            try:
                async with asyncio.timeout(self._settings.run_timeout_seconds):
                    await self._turns.snapshots(job.turn)
                    await asyncio.shield(self.ensure_warm())
                    # Imported after the warm-up: the gateway needs CrewAI-side types, which load in seconds.
                    from agent_runtime.engine.runs.gateway import RunGateway

                    gateway = RunGateway(
                        self._client(),
                        job.events,
                        recorder,
                        answer_message_id=str(uuid4()),
                        model=self._settings.effective_llm_model,
                        stops_at=[*self._turns.approval_tools, *(t.name for t in job.turn.run_input.frontend_tools)],
                        frontend_tools=job.turn.run_input.frontend_tools,
                        state=job.turn.state,
                    )
                    result = await self._turns.run(job.turn, gateway, recorder)
            except BaseException as exc:
                failure = job.stop_reason or RunFailure.of(exc)
                await self._fail(job, failure, recorder.failed_rows(f"{failure.code}: {failure.message}"), exc)
                if not isinstance(exc, Exception) and job.stop_reason is None:
                    raise  # cancelled by someone who did not say why (e.g. the loop closing): stay cancelled
                return
            job.ending = True
            job.route = result.route
            waiting = result.waiting.model_dump(mode="json") if result.waiting is not None else None
            end = await self._ending.record(job.ctx, job.started, "completed", result.rows, waiting=waiting)
            if end is None:
                # The rows could not be stored (logged with the cause): record at least the failure.
                lost = RunFailure("internal_error", "the run's result could not be stored")
                await self._fail(job, lost, [], None)
                return
            await self._announce(job, end, result)
        finally:
            self._jobs.pop(job.run_id, None)
            self.admission.release()

    async def _announce(self, job: _RunJob, end: RunEnd, result: TurnResult) -> None:
        if result.answer_message_id is not None:
            try:
                await self._turns.retract_unstored_text(job.turn, keep=result.answer_message_id)
            except Exception:
                log.exception("could not send the run's messages snapshot", extra={"run_id": str(job.run_id)})
        totals = end.totals
        self._turns.finished(job.turn, totals, result)
        log.info("run completed", extra={"run_id": str(job.run_id), "route": job.route, "cost": str(totals.cost)})

    async def _fail(self, job: _RunJob, failure: RunFailure, rows: list[NewMessage], exc: BaseException | None) -> None:
        error_id = uuid4().hex
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

    # -- process life --------------------------------------------------------------------------------

    def start_background(self) -> None:
        """Start the lease keeper (renewals and sweeps); the lifespan calls it once, on the app's loop."""
        self._loop = asyncio.get_running_loop()
        self.leases.start()

    def request_drain(self) -> None:
        """Start draining on the app's loop; safe from a signal handler or another thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        self.admission.draining = True
        if self._draining is None:
            self._draining = asyncio.create_task(self.drain(), name="drain")

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
        tasks = {job.task for job in self._jobs.values() if job.task is not None}
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

    async def aclose(self) -> None:
        await (self._draining if self._draining is not None else self.drain())
        await self.leases.stop()
        self._threads.shutdown()
