from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query, Response

from agent_runtime.api.deps import Caller, Engine, Paging
from agent_runtime.api.errors import error_responses
from agent_runtime.engine.text import ClientText
from agent_runtime.engine.user_memories.models import MemoryPage

router = APIRouter(prefix="/v1/memories", tags=["memories"])


@router.get("", response_model=MemoryPage, responses=error_responses(401, 422, 429, 503))
async def list_memories(
    engine: Engine,
    ctx: Caller,
    page: Paging,
    q: Annotated[
        ClientText | None,
        Query(min_length=1, max_length=500, description="Search: text matches first, then by meaning."),
    ] = None,
) -> MemoryPage:
    """The caller's long-term memories, newest first (with `q`: the closest first; searches are limited per user,
    429 `too_many_searches`, and per server, 503 `search_busy`, both with `Retry-After`)."""
    return await engine.memories.page(ctx, limit=page.limit, offset=page.offset, q=q)


@router.delete("/{memory_id}", status_code=204, response_class=Response, responses=error_responses(401, 404, 422))
async def delete_memory(memory_id: UUID, engine: Engine, ctx: Caller) -> Response:
    """Forget one memory (another user's answers 404 like a missing one)."""
    await engine.memories.delete(ctx, memory_id)
    return Response(status_code=204)


@router.delete("", status_code=204, response_class=Response, responses=error_responses(401))
async def delete_all_memories(engine: Engine, ctx: Caller) -> Response:
    """Forget every memory of the caller. Deleting a session does not delete the memories taken from it."""
    await engine.memories.delete_all(ctx)
    return Response(status_code=204)
