from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any
from uuid import UUID

from ag_ui.core import AgentCapabilities
from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from agent_runtime.api.deps import Caller, Engine, Paging, StreamCaller
from agent_runtime.api.errors import error_responses
from agent_runtime.api.sse import with_keepalive
from agent_runtime.engine.conversation.chat_messages import UserMessage
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.runs.agui.capabilities import agent_capabilities
from agent_runtime.engine.runs.agui.hydrate import Hydration
from agent_runtime.engine.runs.agui.input import AguiRunInput
from agent_runtime.engine.runs.events.log import LoggedEvent
from agent_runtime.engine.runs.job import RunHandle
from agent_runtime.engine.runs.ledger.store import RunSummary
from agent_runtime.engine.runs.request.models import (
    LAST_EVENT_ID_PATTERN,
    RunCancel,
    RunInput,
    RunRequest,
    parse_last_event_id,
)
from agent_runtime.engine.runs.request.regenerate import rest_run_input
from agent_runtime.engine.runtime import RuntimeEngine

router = APIRouter(prefix="/v1", tags=["runs"])

_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as Server-Sent Events (`id: <run_id>:<seq>\\ndata: <json>\\n\\n`): "
        "RUN_STARTED first, RUN_FINISHED or RUN_ERROR last; while silent, `: keepalive` comment lines every "
        "SSE_KEEPALIVE_SECONDS. Resume with the last `id` at `GET /v1/sessions/{session_id}/runs/{run_id}/events`.",
        "content": {
            "text/event-stream": {
                # OpenAPI 3.1 without `itemSchema`: the schema describes one event of the stream.
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "description": "One AG-UI event (ag-ui-protocol) as JSON; its `type` names it.",
                        },
                        "id": {"type": "string", "description": "`<run_id>:<seq>`, for `Last-Event-ID`."},
                        "event": {"type": "string", "description": "Not sent: the SSE default, `message`."},
                    },
                }
            }
        },
    }
}


def _frames(run_id: UUID | None, events: AsyncIterator[LoggedEvent]) -> AsyncIterator[str]:
    """SSE frames: `id: <run_id>:<seq>` and data for a run's log; data only for a hydrate made without one."""

    async def frames() -> AsyncIterator[str]:
        async for event in events:
            yield event.sse(run_id) if run_id is not None else f"data: {event.data}\n\n"

    return frames()


def _event_stream(run_id: str, frames: AsyncIterator[str], keepalive_seconds: float) -> StreamingResponse:
    return StreamingResponse(
        with_keepalive(frames, keepalive_seconds),
        media_type="text/event-stream",
        # No proxy buffering or caching: events must reach the browser as they happen.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Run-ID": run_id},
    )


def _sse(handle: RunHandle, engine: RuntimeEngine) -> StreamingResponse:
    frames = _frames(handle.run_id, handle.events.stream())
    return _event_stream(str(handle.run_id), frames, engine.settings.sse_keepalive_seconds)


@router.post(
    "/sessions/{session_id}/runs",
    response_class=StreamingResponse,
    responses={**_SSE_DOC, **error_responses(400, 401, 402, 404, 408, 409, 413, 422, 429, 503)},
)
async def run_session(session_id: UUID, body: RunRequest, engine: Engine, ctx: Caller) -> StreamingResponse:
    """Run the agent on a new user message, or resume a run that stopped for approvals (`resume`: one
    entry per interrupt of its RUN_FINISHED), or answer the last user turn again (`regenerate: true`: the
    previous reply becomes audit, see docs/api.md); the answer streams back as AG-UI events.

    Refused before any event: 409 `run_in_progress` (this session runs already) or `interrupt_pending` (the
    session waits for approvals and the request does not answer them), and for `regenerate: true`
    `regenerate_pending` (the last turn waits for approvals or tool results) or `nothing_to_regenerate` (no
    user message yet); 429 `server_busy` (this process runs
    MAX_CONCURRENT_RUNS) or `too_many_runs` (you run MAX_CONCURRENT_RUNS_PER_USER), both with `Retry-After`,
    and 503 `shutting_down`.
    """
    if body.regenerate:
        return _sse(await engine.runs.start(ctx, session_id, rest_run_input(body)), engine)
    messages = []
    if body.message is not None:
        images = [image.attachment() for image in body.images]
        given = {"id": body.message_id} if body.message_id else {}
        messages = [UserMessage(content=body.message, images=images, **given)]
    results = [result.message() for result in body.tool_results]
    run_input = RunInput(new_messages=messages, context=body.context, resume=body.resume, tool_results=results)
    return _sse(await engine.runs.start(ctx, session_id, run_input), engine)


@router.get(
    "/sessions/{session_id}/runs",
    response_model=Page[RunSummary],
    responses=error_responses(401, 404, 422),
)
async def list_runs(session_id: UUID, engine: Engine, ctx: Caller, page: Paging) -> Page[RunSummary]:
    """The session's runs, newest first: status, and for a failed run its error code and error_id."""
    return await engine.runs.list_runs(ctx, session_id, limit=page.limit, offset=page.offset)


@router.get(
    "/sessions/{session_id}/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={**_SSE_DOC, **error_responses(401, 404, 410, 422)},
)
async def run_events(
    session_id: UUID,
    run_id: UUID,
    engine: Engine,
    ctx: StreamCaller,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            pattern=LAST_EVENT_ID_PATTERN,
            description="`<run_id>:<seq>` (this run's id): resume after this event.",
        ),
    ] = None,
    # Not ClientText: its NUL-free `pattern` would take this one's place in the document, which then called ""
    # valid (this pattern refuses NUL too).
    last_event_id_param: Annotated[
        str | None,
        Query(
            alias="last_event_id",
            pattern=LAST_EVENT_ID_PATTERN,
            description="The same, for clients that cannot set headers.",
        ),
    ] = None,
) -> StreamingResponse:
    """Resume (or watch) a run's stream from any replica: with `Last-Event-ID` the events after it, without it
    from the start; live until the terminal event (a finished run replays and ends; a run whose server died
    ends with RUN_ERROR `run_lost`). 404 for a run that is not yours, 410 past the event retention."""
    if last_event_id is not None:
        after = parse_last_event_id(run_id, last_event_id, where=["header", "Last-Event-ID"])
    else:
        after = parse_last_event_id(run_id, last_event_id_param, where=["query", "last_event_id"])
    events = await engine.runs.follow(ctx, session_id, run_id, after=after)
    return _event_stream(str(run_id), _frames(run_id, events), engine.settings.sse_keepalive_seconds)


@router.post(
    "/sessions/{session_id}/runs/{run_id}/cancel",
    status_code=202,
    response_model=RunCancel,
    responses=error_responses(401, 404, 422),
)
async def cancel_run(session_id: UUID, run_id: UUID, engine: Engine, ctx: Caller) -> RunCancel:
    """Stop the run wherever it runs (idempotent). The model request is closed, what it produced is stored (the
    answer as far as it streamed, marked `partial`), and the run ends with RUN_FINISHED outcome `cancelled`.
    Closing the run's stream does not cancel it."""
    return RunCancel(id=run_id, status=await engine.runs.cancel(ctx, session_id, run_id))


@router.post(
    "/agui",
    response_class=StreamingResponse,
    responses={**_SSE_DOC, **error_responses(400, 401, 402, 404, 408, 409, 413, 422, 429, 503)},
)
async def run_agui(
    body: AguiRunInput,
    engine: Engine,
    ctx: Caller,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="For a hydrate joining a live run: `<run_id>:<seq>`, join it after this event.",
        ),
    ] = None,
) -> StreamingResponse:
    """The AG-UI endpoint: `threadId` is one of the caller's sessions (create it with `POST /v1/sessions`;
    any other id is a 404, whether it exists or not). The stored thread is the truth: of `messages`, only
    new user messages and results for pending frontend tool calls are taken (anything else is reported in a
    CUSTOM `input_ignored` event); `resume` answers the interrupts of the previous run. An input with nothing
    new is a hydrate (docs/api.md, "Reconnecting to a thread"): the thread's live run if it has one, else its
    messages, state and what it waits for; nothing runs."""
    started = await engine.runs.start_agui(ctx, body, last_event_id=last_event_id)
    if isinstance(started, Hydration):
        frames = _frames(started.live_run_id, started.events)
        return _event_stream(started.run_id, frames, engine.settings.sse_keepalive_seconds)
    return _sse(started, engine)


@router.get(
    "/agui/capabilities",
    response_model=AgentCapabilities,
    response_model_exclude_none=True,
    response_model_by_alias=True,
    responses=error_responses(401),
)
async def agui_capabilities(engine: Engine, ctx: Caller) -> AgentCapabilities:
    """What this server does, as AG-UI 1.0 `AgentCapabilities`: its tools, state, reasoning (only when a stage
    streams it), human in the loop (approvals as interrupts, client tools), image input (when every stage's model
    takes images), long-term memory (when on), resumable streams, and (under `custom`) cancel. Derived from the
    running configuration."""
    return agent_capabilities(engine.settings, engine.runs.grants)


# The routes that start a run: while the process is full or draining, the middleware refuses them before
# they are routed, authenticated or parsed (api/app.py, `shed_requests`).
RUN_STARTING_ENDPOINTS = (run_session, run_agui)
