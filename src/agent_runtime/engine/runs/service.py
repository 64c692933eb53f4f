"""Runs: start (atomically, 409 on a concurrent run), execute in the background, stream AG-UI events.

The flow runs in its own task, not in the HTTP response: a client that disconnects mid-stream does
not cancel it, so the answer is still stored (a reload shows it) and the session never stays
`running`. Shutdown waits for runs in flight (bounded), then cancels them; a cancelled run is
recorded as failed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from dataclasses import dataclass
from uuid import UUID, uuid4

import asyncpg
from ag_ui.core import RunAgentInput

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import AppError
from agent_runtime.engine.flow.crewai_env import configure_crewai_env
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.tools import engine_tools
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.memory.tokens import litellm_token_counter
from agent_runtime.engine.messages.store import MessageStore
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.runs.agui_input import check_agui_input, run_input_from_agui, thread_session_id
from agent_runtime.engine.runs.agui_mapper import AguiStream
from agent_runtime.engine.runs.events import RunEvents
from agent_runtime.engine.runs.models import RunInput
from agent_runtime.engine.runs.pending import PendingStore, SessionAguiState
from agent_runtime.engine.runs.recorder import RunRecorder
from agent_runtime.engine.runs.run_events import ModelUsage
from agent_runtime.engine.runs.run_state import RunStateTracker
from agent_runtime.engine.runs.turn_input import TokenCounter, TurnInputs, message_token_limit, rows_to_store
from agent_runtime.engine.runs.turn_plan import PendingChangedError, TurnPlan
from agent_runtime.engine.runs.turn_runner import RunJob, TurnOutcome, TurnRunner
from agent_runtime.engine.sessions.service import SessionService
from agent_runtime.logging_setup import request_id_var
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunHandle:
    session_id: UUID
    run_id: UUID
    events: AguiStream


@dataclass(frozen=True)
class RunFailure:
    code: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> RunFailure:
        if isinstance(exc, AppError):
            return cls(exc.code, exc.message)
        if isinstance(exc, TimeoutError):
            return cls("run_timeout", "the run took longer than RUN_TIMEOUT_SECONDS")
        if isinstance(exc, asyncio.CancelledError):
            return cls("run_cancelled", "the run was cancelled (server shutting down)")
        # Never str(exc) to clients: it may carry internals; the log has the traceback under error_id.
        return cls("internal_error", "the run failed unexpectedly")


class RunService:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        sessions: SessionService,
        messages: MessageStore,
        profiles: ProfileService,
        templates: FlowTemplates,
    ) -> None:
        self._settings = settings
        self._pool = pool
        self._sessions = sessions
        self._messages = messages
        self._profiles = profiles
        self._templates = templates
        self._llm: LLMClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._warm: asyncio.Task[None] | None = None
        self._tools = engine_tools(profiles)
        self._pending = PendingStore(pool)
        self._turns = TurnRunner(settings, pool, messages, profiles, templates, self._tools, self._pending)
        self._inputs = TurnInputs(
            messages,
            {name: self._tools.get(name) for name in self._tools.names()},
            token_limit=message_token_limit(settings.memory_max_tokens),
            counter=self._token_counter,
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
        from agent_runtime.engine.flow.crewai_env import ensure_worker_threads, load_crewai

        # Importing CrewAI and LiteLLM (and building the LLM client, which imports LiteLLM) is blocking CPU
        # work that neither library offers an async way to do; a worker thread keeps the loop serving
        # requests meanwhile (the import lock makes a concurrent first run simply wait).
        await asyncio.to_thread(load_crewai, self._settings.data_dir)
        await asyncio.to_thread(__import__, "agent_runtime.engine.flow.crew_flow")
        await asyncio.to_thread(self._client)
        ensure_worker_threads(asyncio.get_running_loop(), workers=64)
        # The imports leave ~520k long-lived objects, and every full collection scans them all: ~270 ms with
        # every thread stopped, the event loop included. That was the 0.35-0.5 s stall when 20 runs start at
        # once. Freezing moves them out of the collector's sight; they are module-level and never garbage.
        gc.freeze()

    async def start(self, ctx: RequestContext, session_id: UUID, run_input: RunInput) -> RunHandle:
        return await self._start(ctx, session_id, run_input, await self._pending.load(ctx, session_id))

    async def start_agui(self, ctx: RequestContext, agui_input: RunAgentInput) -> RunHandle:
        """AG-UI entry: the thread is one of the caller's sessions. A thread id that is not the caller's
        session is a 404 whether it exists or not (new threads come from `POST /v1/sessions`), so thread
        ids cannot be probed. Messages already stored (matched by id) are history; see agui_input.py for
        what else is taken."""
        check_agui_input(agui_input)
        session_id = thread_session_id(agui_input)
        thread = await self._pending.load(ctx, session_id)
        ids = [m.id for m in agui_input.messages]
        stored = await self._messages.existing_message_ids(ctx, session_id, ids) if ids else set()
        run_input = run_input_from_agui(
            agui_input, stored_ids=stored, pending=thread.pending, server_tools=self._tools.names()
        )
        if run_input.ignored:
            # Named explicitly: ops match this line to the response's X-Request-ID.
            log.warning(
                "client messages ignored",
                extra={
                    "request_id": request_id_var.get(),
                    "session_id": str(session_id),
                    "ignored": [m.model_dump() for m in run_input.ignored],
                },
            )
        return await self._start(ctx, session_id, run_input, thread)

    async def _start(
        self, ctx: RequestContext, session_id: UUID, run_input: RunInput, thread: SessionAguiState
    ) -> RunHandle:
        plan = await self._inputs.plan(ctx, session_id, run_input, thread.pending)
        run_id = run_input.run_id
        if run_id is None or await self._messages.run_id_used(ctx, session_id, run_id):
            # A reused client run id would merge two runs' rows (and costs); such a run gets its own id.
            run_id = uuid4()
        await self._sessions.start_run(ctx, session_id, run_id)
        expected = plan.pending.id if plan.pending is not None else None
        if not await self._pending.take(ctx, session_id, run_id, expected):
            # Another run changed what the thread waits for between our check and our start.
            await self._sessions.finish_run(ctx, session_id, run_id, "completed")
            raise PendingChangedError("the thread changed while this run was starting; send it again")
        await self._store_input(ctx, session_id, run_id, run_input, plan)
        if run_input.client_state is not None and run_input.client_state != thread.client_state:
            await self._pending.save_client_state(ctx, session_id, run_input.client_state)
        stream = AguiStream(thread_id=str(session_id), run_id=str(run_id))
        events = RunEvents(stream.emit)
        events.run_started()
        if run_input.ignored:
            events.notice("input_ignored", {"messages": [m.model_dump() for m in run_input.ignored]})
        state = RunStateTracker(events, str(run_id))
        client_state = run_input.client_state if run_input.client_state is not None else thread.client_state
        job = RunJob(ctx, session_id, run_id, run_input, plan, client_state, events, state)
        task = asyncio.create_task(self._execute(job), name=f"run-{run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return RunHandle(session_id=session_id, run_id=run_id, events=stream)

    async def _store_input(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, run_input: RunInput, plan: TurnPlan
    ) -> None:
        try:
            # Stored before any model call: whatever happens next, the user's message is kept.
            await self._messages.append(ctx, session_id, rows_to_store(run_input, plan, run_id))
        except BaseException as exc:
            # The session names this error_id like any failed run: the log line must carry it too.
            error_id = uuid4().hex
            log.error(
                "could not store the run's messages",
                exc_info=None if isinstance(exc, AppError) else exc,
                extra={"run_id": str(run_id), "session_id": str(session_id), "error_id": error_id},
            )
            await self._sessions.finish_run(ctx, session_id, run_id, "failed", error_id=error_id)
            raise

    async def _execute(self, job: RunJob) -> None:
        run_id = str(job.run_id)
        recorder = RunRecorder(self._messages, job.ctx, job.session_id, run_id)
        log.info("run started", extra={"run_id": run_id, "session_id": str(job.session_id)})
        try:
            async with asyncio.timeout(self._settings.run_timeout_seconds):
                await self._turns.snapshots(job)
                await asyncio.shield(self.ensure_warm())
                # Imported after the warm-up: the gateway needs CrewAI-side types, which load in seconds.
                from agent_runtime.engine.runs.gateway import RunGateway

                gateway = RunGateway(
                    self._client(),
                    job.events,
                    recorder,
                    answer_message_id=str(uuid4()),
                    model=self._settings.effective_llm_model,
                    stops_at=[*self._turns.approval_tools, *(t.name for t in job.run_input.frontend_tools)],
                    frontend_tools=job.run_input.frontend_tools,
                    state=job.state,
                )
                outcome = await self._turns.run(job, gateway, recorder)
            # Outside the timeout, and the last await: once the session says `completed`, a timeout or an
            # error must not follow with RUN_ERROR (failing the run would then be a no-op on the session).
            await self._sessions.finish_run(job.ctx, job.session_id, job.run_id, "completed")
        except BaseException as exc:
            await self._fail(job, recorder, exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._announce(job, outcome)

    def _announce(self, job: RunJob, outcome: TurnOutcome) -> None:
        totals = outcome.totals
        model = self._settings.effective_llm_model
        job.events.notice(
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
        usage = ModelUsage(
            model=model,
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            cached_input_tokens=totals.cached_tokens,
        )
        job.state.update(
            status="interrupted" if outcome.interrupts else "completed",
            stage=None,
            route=outcome.route,
            pending_tool_call_ids=list(outcome.pending_tool_call_ids),
            interrupts=[i.id for i in outcome.interrupts],
        )
        job.events.run_finished(
            usage=[usage], pending_tool_call_ids=outcome.pending_tool_call_ids, interrupts=outcome.interrupts
        )
        log.info("run completed", extra={"run_id": str(job.run_id), "route": outcome.route, "cost": str(totals.cost)})

    async def _fail(self, job: RunJob, recorder: RunRecorder, exc: BaseException) -> None:
        error_id = uuid4().hex
        failure = RunFailure.of(exc)
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
        # Shielded: when the run is being cancelled, its failure must still be written.
        try:
            await asyncio.shield(self._record_failure(job, recorder, error_id, f"{failure.code}: {failure.message}"))
        finally:
            job.state.update(status="failed")
            job.events.run_error(code=failure.code, message=f"{failure.message} (error_id {error_id})")

    async def _record_failure(self, job: RunJob, recorder: RunRecorder, error_id: str, reason: str) -> None:
        try:
            await recorder.failed(reason)
        except Exception:
            log.exception("could not store the outputs of a failed run", extra={"run_id": str(job.run_id)})
        await self._sessions.finish_run(job.ctx, job.session_id, job.run_id, "failed", error_id=error_id)
        try:
            await self._turns.retract_unstored_text(job, keep=None)
        except Exception:
            log.exception("could not send the failed run's messages snapshot", extra={"run_id": str(job.run_id)})

    async def aclose(self) -> None:
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=self._settings.shutdown_grace_seconds)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
