from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Query, Response

from agent_runtime.api.deps import Caller, Engine, Paging
from agent_runtime.api.errors import error_responses
from agent_runtime.engine.conversation.stored_messages import StoredMessage
from agent_runtime.engine.pagination import Page
from agent_runtime.engine.sessions.models import SESSION_CREATE_EXAMPLES, Session, SessionCreate, SessionUpdate
from agent_runtime.engine.text import ClientText

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post("", status_code=201, response_model=Session, responses=error_responses(400, 401, 408, 413, 422, 429))
async def create_session(
    engine: Engine,
    ctx: Caller,
    body: Annotated[SessionCreate | None, Body(examples=SESSION_CREATE_EXAMPLES)] = None,
) -> Session:
    """Create a session; billing currency (CNY) and the caller's country are frozen on it."""
    return await engine.sessions.create(ctx, body or SessionCreate())


@router.get("", response_model=Page[Session], responses=error_responses(401, 422))
async def list_sessions(
    engine: Engine,
    ctx: Caller,
    page: Paging,
    q: Annotated[ClientText | None, Query(max_length=200, description="Case-insensitive title search.")] = None,
) -> Page[Session]:
    """The caller's sessions, newest first."""
    return await engine.sessions.list(ctx, limit=page.limit, offset=page.offset, q=q)


@router.get("/{session_id}", response_model=Session, responses=error_responses(401, 404, 422))
async def get_session(session_id: UUID, engine: Engine, ctx: Caller) -> Session:
    return await engine.sessions.get(ctx, session_id)


@router.patch("/{session_id}", response_model=Session, responses=error_responses(400, 401, 404, 408, 413, 422))
async def update_session(session_id: UUID, body: SessionUpdate, engine: Engine, ctx: Caller) -> Session:
    """Edit the title."""
    return await engine.sessions.update(ctx, session_id, body)


@router.delete("/{session_id}", status_code=204, response_class=Response, responses=error_responses(401, 404, 422))
async def delete_session(session_id: UUID, engine: Engine, ctx: Caller) -> Response:
    """Delete the session and all its messages."""
    await engine.sessions.delete(ctx, session_id)
    return Response(status_code=204)


@router.get(
    "/{session_id}/images/{image_id}",
    response_class=Response,
    responses={
        200: {"content": {t: {} for t in ("image/jpeg", "image/png", "image/webp")}},
        **error_responses(401, 404, 422),
    },
)
async def get_image(session_id: UUID, image_id: UUID, engine: Engine, ctx: Caller) -> Response:
    """An inline image of one of your messages (as `content_parts` and MESSAGES_SNAPSHOT name it); 404 for anyone
    else's. URL images are not served: their parts carry the client's URL."""
    image = await engine.messages.image(ctx, session_id, image_id.hex)  # stored as uuid4().hex
    headers = {"Cache-Control": "private, max-age=86400", "X-Content-Type-Options": "nosniff"}
    return Response(content=image.data, media_type=image.mime_type, headers=headers)


@router.get("/{session_id}/messages", response_model=Page[StoredMessage], responses=error_responses(401, 404, 422))
async def list_messages(
    session_id: UUID,
    engine: Engine,
    ctx: Caller,
    page: Paging,
    superseded: Annotated[
        bool,
        Query(description="Instead of the visible thread: the replies regenerations replaced (audit now, billed)."),
    ] = False,
) -> Page[StoredMessage]:
    """Visible messages (seq > 0, without replies a regeneration replaced) in seq order."""
    return await engine.messages.list_visible(
        ctx, session_id, limit=page.limit, offset=page.offset, superseded=superseded
    )
