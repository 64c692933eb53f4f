"""Runs: admitted, started atomically under a lease, executed in the background, streamed as AG-UI events.
A run's life, room by room (admission, start, flow, end or sweep, drain, the event log): docs/architecture.md, "Runs".
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID, uuid4

import asyncpg
from ag_ui.core import RunAgentInput

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.conversation.tokens import token_counter_for
from agent_runtime.engine.errors import RunInProgressError
from agent_runtime.engine.flow.contracts import STAGE_NAMES
from agent_runtime.engine.flow.model_call import IntentDecided
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.tools import Tool, engine_tools
from agent_runtime.engine.flow.tools.grants import ToolGrants
from agent_runtime.engine.flow.turn import is_agent_bookkeeping, prepare_agent
from agent_runtime.engine.llm.client import Clock, LLMClient
from agent_runtime.engine.llm.inline_requests import builds_an_async_request
from agent_runtime.engine.llm.models import CallOptions
from agent_runtime.engine.loop_executor import install as install_loop_executor
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.profiles.service import ProfileService
from agent_runtime.engine.runs.admission import Admission
from agent_runtime.engine.runs.agui.hydrate import Hydration
from agent_runtime.engine.runs.agui.input import read_agui_input
from agent_runtime.engine.runs.agui.mapper import AguiStream, log_endings
from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.events.hub import RunEventHub, run_not_found
from agent_runtime.engine.runs.events.log import LoggedEvent, RunEventLog
from agent_runtime.engine.runs.events.state import RunStateTracker
from agent_runtime.engine.runs.events.store import EventStore
from agent_runtime.engine.runs.execution import RunExecution
from agent_runtime.engine.runs.job import RunHandle, RunJob, Started, process_owner_id
from agent_runtime.engine.runs.ledger.finish import CANCELLED, HANDED_OVER, RunFailure
from agent_runtime.engine.runs.ledger.keeper import LeaseKeeper
from agent_runtime.engine.runs.ledger.reservation import RunReservation
from agent_runtime.engine.runs.ledger.store import RunIdTakenError, RunStore, RunSummary, StartedRun
from agent_runtime.engine.runs.reconnect import hydrate
from agent_runtime.engine.runs.request.images import image_policy
from agent_runtime.engine.runs.request.models import RunInput
from agent_runtime.engine.runs.request.pending import PendingStore, SessionAguiState
from agent_runtime.engine.runs.request.plan import TurnPlan, plan_turn
from agent_runtime.engine.runs.request.regenerate import refuse_resent_run, require_regenerable
from agent_runtime.engine.runs.request.turn_input import (
    TokenCounter,
    check_turn_input,
    message_token_limit,
    rows_to_store,
)
from agent_runtime.engine.runs.takeover.store import TakeoverStore
from agent_runtime.engine.runs.takeovers import Takeovers
from agent_runtime.engine.runs.turn.runner import TurnJob, TurnRunner
from agent_runtime.engine.runs.warmup import Warmup, WarmupState
from agent_runtime.engine.user_memories.service import MemoryService
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)

# A run's input fields stored as its rows: the copy a takeover reads leaves them out (images are big).
_STORED_AS_ROWS = {"new_messages", "tool_results", "ignored"}


class RunService:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        messages: MessageStore,
        templates: FlowTemplates,
        *,
        dsn: str | None = None,
        clock: Clock | None = None,
        tools: Sequence[Tool[Any]] = (),
    ) -> None:
        """`dsn`: for the connection that LISTENs for run events and controls; without it (tests of the engine
        alone) followers of other processes' runs poll the stored log. `clock`: when model calls start, for
        their prices (None: the wall clock). `tools`: registered beside the built-in ones."""
        self._settings = settings
        self._pool = pool
        self._messages = messages
        self._warmup = Warmup(settings, clock=clock)
        self._jobs: dict[UUID, RunJob] = {}
        # Every run task until it is done (a run leaves `_jobs` a moment earlier, before its log's last write).
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        self._drain_begun = asyncio.Event()
        self.admission = Admission(settings.max_concurrent_runs)
        self._reservation = RunReservation(settings, templates, clock=clock)
        self.store = RunStore(
            pool,
            owner=process_owner_id(),
            lease_seconds=settings.run_lease_seconds,
            endings=log_endings(),
            reserve=self._reservation.chunk,
            least_reserve=self._reservation.floor,
            most_takeovers=settings.run_max_takeovers,
        )
        self.leases = LeaseKeeper(
            self.store,
            heartbeat_seconds=settings.run_heartbeat_seconds,
            sweep_seconds=settings.run_sweep_seconds,
            events_retention_seconds=settings.run_events_retention_seconds,
            held=lambda: [job.held() for job in self._jobs.values()],
            on_lost=self._lost,
            on_cancel=self._cancel_requested,
            take_over=self._take_over,
        )
        self.events = EventStore(pool)
        connect_timeout = settings.database_connect_timeout_seconds
        self.hub = RunEventHub(self.events, dsn=dsn, on_cancel=self._cancel_requested, connect_timeout=connect_timeout)
        self.memories = MemoryService(settings, pool, self._client)
        self._profiles = ProfileService(pool)
        self.grants = ToolGrants(templates, engine_tools(self._profiles, self.memories, tools))
        self.takeovers = Takeovers(
            TakeoverStore(pool, owner=self.store.owner, lease_seconds=settings.run_lease_seconds),
            most_takeovers=settings.run_max_takeovers,
            admission=self.admission,
            messages=messages,
            hub=self.hub,
            grants=lambda: self.grants,
            launch=self._launch,
        )
        self._pending = PendingStore(pool)
        stage_options: dict[str, CallOptions] = {s: templates.call_options(s, settings) for s in STAGE_NAMES}
        self._images = image_policy(stage_options, settings)
        self._execution = RunExecution(
            settings,
            messages,
            TurnRunner(settings, pool, messages, templates, self._client, memories=self.memories),
            store=self.store,
            reservation=self._reservation,
            stage_options=stage_options,
            admission=self.admission,
            hub=self.hub,
            takeovers=self.takeovers,
            jobs=self._jobs,
            warm=self.ensure_warm,
        )
        prepare_agent(settings.data_dir)

    @property
    def tool_map(self) -> dict[str, Tool[Any]]:
        return self.grants.by_name

    def regrant(self, templates: FlowTemplates, tools: Sequence[Tool[Any]]) -> set[asyncio.Task[None]]:
        """Runs that start from now on get `templates`' tools, found among `tools` and the engine's own (a reload
        of TOOLS_FILE); returns the runs in flight, which keep the tools they started with."""
        self.grants = ToolGrants(templates, engine_tools(self._profiles, self.memories, tools))
        return set(self._tasks)

    async def _take_over(self) -> None:
        await self.takeovers.take_over()

    def _client(self) -> LLMClient:
        return self._warmup.client()

    @property
    def warm_up(self) -> WarmupState:
        return self._warmup.state

    async def until_warm(self) -> None:
        """Until the warm-up is done (raising its error), or a drain begins: a stop need not wait for the imports."""
        await self._warmup.wait(unless=self._drain_begun)

    async def _token_counter(self) -> TokenCounter:
        await asyncio.shield(self.ensure_warm())  # the tokenizer is LiteLLM's, imported by the warm-up
        return token_counter_for(self._settings.effective_llm_model)

    def ensure_warm(self) -> asyncio.Task[None]:
        """The one warm-up task (started on first call): start-up kicks it off, every run awaits it."""
        return self._warmup.ensure()

    # -- start ---------------------------------------------------------------------------------------

    async def start(self, ctx: RequestContext, session_id: UUID, run_input: RunInput) -> RunHandle:
        with self.admission.starting():
            # A new turn is planned as if nothing were pending (its start checks); answers, regenerations need them.
            answers = run_input.resume or run_input.tool_results or run_input.regenerate
            thread = await self._pending.load(ctx, session_id) if answers else None
            return await self._start(ctx, session_id, run_input, thread)

    async def start_agui(
        self, ctx: RequestContext, agui_input: RunAgentInput, *, last_event_id: str | None = None
    ) -> RunHandle | Hydration:
        """AG-UI entry: the thread is one of the caller's sessions, a 404 otherwise whether it exists or not
        (new threads come from `POST /v1/sessions`: ids cannot be probed); agui/input.py says what is taken.
        An input with nothing to run is a hydrate (agui/hydrate.py), which `last_event_id` may place."""
        with self.admission.starting():
            request = await read_agui_input(
                ctx,
                agui_input,
                self._pending,
                server_tools=self.grants.registry.names(),
                offer_tools=self._settings.agui_frontend_tools,
            )
            if request.run_input is None:
                return await hydrate(ctx, request, agui_input, last_event_id, self.hub, self._messages, self.tool_map)
            return await self._start(ctx, request.session_id, request.run_input, request.thread)

    async def _start(
        self, ctx: RequestContext, session_id: UUID, run_input: RunInput, thread: SessionAguiState | None
    ) -> RunHandle:
        require_regenerable(run_input, thread)
        plan = plan_turn(run_input, thread.pending if thread else None, self.tool_map)
        limit = message_token_limit(self._settings.memory_max_tokens)
        run_input = await check_turn_input(run_input, limit=limit, counter=self._token_counter, images=self._images)
        self.admission.admit()
        try:
            admitted = await self._start_in_db(ctx, session_id, run_input, plan)
        except BaseException:
            self.admission.release()
            raise
        started = admitted.run
        log = self.hub.open_log(started.run_id, ctx.user_id)
        stream = AguiStream(thread_id=str(session_id), run_id=str(started.run_id), log=log, legacy=run_input.legacy)
        events = RunEvents(stream.emit)
        events.run_started()
        if run_input.ignored:
            events.notice("input_ignored", {"messages": [m.model_dump() for m in run_input.ignored]})
        plan = admitted.plan
        resumes = plan.pending.decided() if plan.continues and plan.pending else None
        self._launch(ctx, started, run_input, plan, events, stream.log, resumes=resumes)
        return RunHandle(session_id=session_id, run_id=started.run_id, events=stream)

    def _launch(
        self,
        ctx: RequestContext,
        started: StartedRun,
        run_input: RunInput,
        plan: TurnPlan,
        events: RunEvents,
        log: RunEventLog,
        *,
        resumes: IntentDecided | None,
    ) -> None:
        turn = TurnJob(
            ctx=ctx,
            session_id=started.session.id,
            run_id=started.run_id,
            profile=started.profile,
            run_input=run_input,
            plan=plan,
            client_state=started.client_state,
            events=events,
            state=RunStateTracker(events, str(started.run_id)),
            grants=self.grants,
            resumes=resumes,
            on_intent=functools.partial(self.takeovers.store.record_resume_point, ctx, started.run_id),
            has_memories=started.has_memories,
            memory_generation=started.memory_generation,
        )
        job = RunJob(ctx, started, turn, log)
        self._jobs[started.run_id] = job
        job.task = asyncio.create_task(self._execution.run(job), name=f"run-{started.run_id}")
        self._tasks.add(job.task)
        job.task.add_done_callback(self._tasks.discard)

    async def _start_in_db(self, ctx: RequestContext, session_id: UUID, run_input: RunInput, plan: TurnPlan) -> Started:
        run_id = run_input.run_id or uuid4()
        swept, state, regenerate = False, run_input.client_state, run_input.regenerate
        while True:
            expected = plan.pending.id if plan.pending is not None else None
            rows = rows_to_store(run_input, plan, run_id)
            resumes = plan.pending.decided().model_dump(mode="json") if plan.continues and plan.pending else None
            try:
                started = await self.store.start(
                    ctx,
                    session_id,
                    run_id,
                    rows,
                    pending_id=expected,
                    client_state=state,
                    regenerate=regenerate,
                    # Its messages and results are the rows above: what a takeover needs besides them.
                    run_input=run_input.model_dump(mode="json", exclude=_STORED_AS_ROWS),
                    resume_point=resumes,
                )
            except RunIdTakenError:
                if regenerate:
                    raise refuse_resent_run(str(run_id)) from None
                # A reused client run id would merge two runs' rows (and costs); such a run gets its own id.
                run_id = uuid4()
                continue
            if started is not None:
                return Started(run=started, plan=plan)
            thread = await self._pending.load(ctx, session_id)
            if (thread.pending.id if thread.pending else None) != expected:
                # The session waits for something else than planned: plan again (409 interrupt_pending if unanswered).
                plan = plan_turn(run_input, thread.pending, self.tool_map)
                continue
            if swept:
                raise RunInProgressError(f"session {session_id} already has a run in progress")
            # Its run may be one whose process died and whose lease expired since the last sweep.
            swept = True
            await self.leases.sweep_once()

    # -- process life --------------------------------------------------------------------------------

    def start_background(self) -> None:
        """Start the lease keeper (renewals and sweeps); the lifespan calls it once, on the app's loop. The loop's
        default executor runs the jobs that never block inline (engine/loop_executor.py)."""
        self._loop = asyncio.get_running_loop()
        install_loop_executor(self._loop, (is_agent_bookkeeping, builds_an_async_request))
        self.leases.start()
        self.hub.start()

    def request_drain(self) -> None:
        """Start draining on the app's loop; safe from a signal handler or another thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        self.admission.draining = True
        self._drain_begun.set()
        if self._draining is None:
            self._draining = asyncio.create_task(self.drain(), name="drain")

    async def follow(
        self, ctx: RequestContext, session_id: UUID, run_id: UUID, *, after: int
    ) -> AsyncIterator[LoggedEvent]:
        """A run's events after seq `after`, to its terminal event, wherever the run runs (events/hub.py)."""
        return await self.hub.follow(ctx, session_id, run_id, after=after)

    async def cancel(self, ctx: RequestContext, session_id: UUID, run_id: UUID) -> str:
        """Stop the run wherever it runs (idempotent); returns its status as stored now."""
        status = await self.events.request_cancel(ctx, session_id, run_id)
        if status is None:
            raise run_not_found(run_id)
        # Here at once when it runs here; elsewhere its process hears the NOTIFY (or its next heartbeat).
        self._cancel_requested({run_id})
        return status

    async def list_runs(self, ctx: RequestContext, session_id: UUID, *, limit: int, offset: int) -> Page[RunSummary]:
        """The session's runs, newest first (404 for a session that is missing or someone else's)."""
        return await self.store.list_for_session(ctx, session_id, limit=limit, offset=offset)

    def _cancel_requested(self, run_ids: set[UUID] | UUID) -> None:
        for job in [self._jobs.get(i) for i in (run_ids if isinstance(run_ids, set) else {run_ids})]:
            if job is not None:
                job.stop(CANCELLED)

    def _lost(self, run_ids: set[UUID]) -> set[UUID]:
        lost = RunFailure("run_lost", "the run lost its lease on the session (it was taken over)")
        stopped: set[UUID] = set()
        for run_id in run_ids:
            job = self._jobs.get(run_id)
            if job is not None and job.stop(lost):
                stopped.add(run_id)
        return stopped

    async def drain(self) -> None:
        """Refuse new runs; give runs in flight SHUTDOWN_GRACE_SECONDS; hand the rest over to another replica
        (engine/runs/takeover/), or end them with `run_interrupted` when they may not be taken over (again).
        Idempotent: called at the shutdown signal (the streams still open, so their last event reaches clients)
        and again at the end."""
        self.admission.draining = True
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._settings.shutdown_grace_seconds)
        interrupted = RunFailure("run_interrupted", "the server shut down before the run finished")
        for job in list(self._jobs.values()):
            job.stop(HANDED_OVER if self.takeovers.may_hand_over(job) else interrupted)
        if pending:
            # One statement each; a database that does not answer leaves them to another replica's sweep.
            await asyncio.wait(pending, timeout=5)

    async def until_drained(self) -> None:
        """Until the drain that `request_drain` began is over (at once if none began)."""
        if self._draining is not None:
            await asyncio.shield(self._draining)  # a cancelled waiter must not cut the drain short

    async def wait_idle(self) -> None:
        """Until no run is in flight, their logs written included (tests and benchmarks)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def aclose(self) -> None:
        await (self._draining if self._draining is not None else self.drain())
        await self.leases.stop()
        await self.hub.stop()
        await self.memories.aclose()
