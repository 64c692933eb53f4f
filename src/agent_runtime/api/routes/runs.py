from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from agent_runtime.api.deps import Caller, Engine, Paging
from agent_runtime.api.errors import error_responses
from agent_runtime.engine.memory.messages import UserMessage
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.runs.models import RunInput, RunRequest
from agent_runtime.engine.runs.service import RunHandle
from agent_runtime.engine.runs.store import RunSummary

router = APIRouter(prefix="/v1", tags=["runs"])

_SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as Server-Sent Events (`data: <json>\\n\\n`): RUN_STARTED first, "
        "RUN_FINISHED or RUN_ERROR last.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def _sse(handle: RunHandle) -> StreamingResponse:
    encoder = EventEncoder()

    async def body() -> AsyncIterator[str]:
        async for event in handle.events.stream():
            yield encoder.encode(event)

    return StreamingResponse(
        body(),
        media_type=encoder.get_content_type(),
        # No proxy buffering or caching: events must reach the browser as they happen.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Run-ID": str(handle.run_id)},
    )


@router.post(
    "/sessions/{session_id}/runs",
    response_class=StreamingResponse,
    responses={**_SSE_DOC, **error_responses(401, 404, 409, 413, 422, 429, 503)},
)
async def run_session(session_id: UUID, body: RunRequest, engine: Engine, ctx: Caller) -> StreamingResponse:
    """Run the agent on a new user message; the answer streams back as AG-UI events.

    Refused before any event: 409 `run_in_progress` (this session runs already), 429 `server_busy` (this
    process runs MAX_CONCURRENT_RUNS) or `too_many_runs` (you run MAX_CONCURRENT_RUNS_PER_USER), both with
    `Retry-After`, and 503 `shutting_down`.
    """
    message = UserMessage(content=body.message, **({"id": body.message_id} if body.message_id else {}))
    handle = await engine.runs.start(ctx, session_id, RunInput(new_messages=[message], context=body.context))
    return _sse(handle)


@router.get(
    "/sessions/{session_id}/runs",
    response_model=Page[RunSummary],
    responses=error_responses(401, 404, 422),
)
async def list_runs(session_id: UUID, engine: Engine, ctx: Caller, page: Paging) -> Page[RunSummary]:
    """The session's runs, newest first: status, and for a failed run its error code and error_id."""
    return await engine.runs.store.list_for_session(ctx, session_id, limit=page.limit, offset=page.offset)


@router.post(
    "/agui",
    response_class=StreamingResponse,
    responses={**_SSE_DOC, **error_responses(401, 404, 409, 413, 422, 429, 503)},
)
async def run_agui(body: RunAgentInput, engine: Engine, ctx: Caller) -> StreamingResponse:
    """The AG-UI endpoint: `threadId` is the session id (created on first use); messages not stored yet
    (matched by id) are appended, and the agent runs on the last of them, which must be a user message."""
    return _sse(await engine.runs.start_agui(ctx, body))
