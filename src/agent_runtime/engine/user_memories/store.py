"""Memories in PostgreSQL: written, listed, searched, recalled and deleted, always as one owner's."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.errors import NotFoundError
from agent_runtime.engine.user_memories.embeddings import Embedder, Embeddings, vector_literal
from agent_runtime.engine.user_memories.lanes import Lane
from agent_runtime.engine.user_memories.models import Memory, MemoryPage, RecalledMemory
from agent_runtime.engine.user_memories.repository import (
    BUMP_GENERATION_SQL,
    COUNT_SQL,
    DELETE_ALL_SQL,
    DELETE_SQL,
    FORGET_SQL,
    INSERT_SQL,
    LIST_SQL,
    RECALL_SQL,
    RECORD_RECALL_SQL,
    SEARCH_SQL,
    UPDATE_SQL,
    row_to_memory,
    row_to_recalled,
)


def memory_not_found(memory_id: UUID) -> NotFoundError:
    return NotFoundError(f"memory {memory_id} not found")


def _like_pattern(q: str) -> str:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True)
class Recall:
    """One recall: the top memories by meaning, and what the session's earlier turns were shown (by message id)."""

    hits: list[RecalledMemory]
    past: dict[str, list[str]]
    embedding: Embeddings


# A turn's text is embedded twice, seconds apart: its recall, then its extraction's look for related memories.
_REMEMBERED_QUERIES = 256


class MemoryStore:
    def __init__(self, pool: asyncpg.Pool, embedder: Embedder) -> None:
        self._pool = pool
        self.embedder = embedder
        self._queries: OrderedDict[str, list[float]] = OrderedDict()

    async def _query_vector(self, text: str, lane: Lane) -> Embeddings:
        """The query's embedding; a text embedded lately is not embedded (nor billed) again."""
        vector = self._queries.get(text)
        if vector is not None:
            self._queries.move_to_end(text)
            return Embeddings(model=self.embedder.model, vectors=[vector])
        embedding = await self.embedder.embed([text], "query", lane=lane)
        self._queries[text] = embedding.vectors[0]
        if len(self._queries) > _REMEMBERED_QUERIES:
            self._queries.popitem(last=False)
        return embedding

    async def add(
        self,
        ctx: RequestContext,
        text: str,
        *,
        sources: Sequence[str],
        session_id: UUID | None,
        vector: list[float],
        generation: int,
    ) -> Memory | None:
        """None: the owner deleted all their memories since `generation` was read (repository.INSERT_SQL)."""
        row = await self._pool.fetchrow(
            INSERT_SQL,
            ctx.user_id,
            text,
            list(sources),
            session_id,
            vector_literal(vector),
            self.embedder.model,
            generation,
        )
        return row_to_memory(row) if row is not None else None

    async def update(
        self,
        ctx: RequestContext,
        memory_id: UUID,
        text: str,
        *,
        sources: Sequence[str],
        session_id: UUID | None,
        vector: list[float],
        generation: int,
    ) -> Memory | None:
        """None: the memory is gone, or the owner deleted all their memories since `generation` was read."""
        row = await self._pool.fetchrow(
            UPDATE_SQL,
            ctx.user_id,
            memory_id,
            text,
            list(sources),
            session_id,
            vector_literal(vector),
            self.embedder.model,
            generation,
        )
        return row_to_memory(row) if row is not None else None

    async def delete(self, ctx: RequestContext, memory_id: UUID) -> None:
        if await self._pool.fetchval(DELETE_SQL, ctx.user_id, memory_id) is None:
            raise memory_not_found(memory_id)

    async def delete_quietly(self, ctx: RequestContext, memory_id: UUID) -> bool:
        return await self._pool.fetchval(DELETE_SQL, ctx.user_id, memory_id) is not None

    async def delete_all(self, ctx: RequestContext) -> int:
        """Every memory of the owner, and every extraction in flight loses its writes (a new generation)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(BUMP_GENERATION_SQL, ctx.user_id)
            status: str = await conn.execute(DELETE_ALL_SQL, ctx.user_id)
        return int(status.rsplit(" ", 1)[-1])

    async def page(self, ctx: RequestContext, *, limit: int, offset: int, q: str | None) -> MemoryPage:
        """The owner's memories, newest first; with `q`, text matches first, then by meaning."""
        embedding = await self.embedder.embed([q], "query", lane=Lane.SEARCH) if q else None
        async with self._pool.acquire() as conn:
            total = await conn.fetchval(COUNT_SQL, ctx.user_id)
            if embedding is None or q is None:
                rows = await conn.fetch(LIST_SQL, ctx.user_id, limit, offset)
            else:
                rows = await conn.fetch(
                    SEARCH_SQL,
                    ctx.user_id,
                    _like_pattern(q),
                    vector_literal(embedding.vectors[0]),
                    self.embedder.model,
                    limit,
                    offset,
                )
        return MemoryPage(items=[row_to_memory(r) for r in rows], total=total, limit=limit, offset=offset)

    async def recall(
        self, ctx: RequestContext, text: str, *, k: int, session_id: UUID | None, lane: Lane, searched: bool = True
    ) -> Recall:
        """`searched=False`: the user had no memory when the run started (its start statement says): nothing to
        embed, search or show again (an earlier turn's block lists memories that exist, and there are none)."""
        if not searched:
            return Recall(hits=[], past={}, embedding=Embeddings(model=self.embedder.model, vectors=[]))
        embedding = await self._query_vector(text, lane)
        rows = await self._pool.fetch(
            RECALL_SQL, ctx.user_id, vector_literal(embedding.vectors[0]), self.embedder.model, k, session_id
        )
        return _recall(rows, embedding)

    async def record_recall(
        self, ctx: RequestContext, session_id: UUID, message_id: str, memory_ids: Sequence[UUID]
    ) -> None:
        if memory_ids:
            await self._pool.execute(RECORD_RECALL_SQL, ctx.user_id, session_id, message_id, list(memory_ids))

    async def forget(self, ctx: RequestContext, what: str, *, min_similarity: float, limit: int) -> list[str]:
        embedding = await self.embedder.embed([what], "query", lane=Lane.RUN)
        rows = await self._pool.fetch(
            FORGET_SQL, ctx.user_id, vector_literal(embedding.vectors[0]), self.embedder.model, min_similarity, limit
        )
        return [r["text"] for r in rows]


def _recall(rows: Sequence[asyncpg.Record], embedding: Embeddings) -> Recall:
    hits = [row_to_recalled(r) for r in rows if r["kind"] == "hit"]
    past: dict[str, list[str]] = {}
    for row in sorted((r for r in rows if r["kind"] == "past"), key=lambda r: r["rank"]):
        past.setdefault(row["message_id"], []).append(row["text"])
    return Recall(hits=hits, past=past, embedding=embedding)
