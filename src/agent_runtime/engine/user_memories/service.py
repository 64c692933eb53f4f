"""MemoryService: recall before a run, extraction after it (in the background), and the user's own view.

Extraction never delays or fails a run: the run hands its finished turn over after RUN_FINISHED was sent, and a
background task (at most USER_MEMORIES_EXTRACTION_CONCURRENCY at once per process; more wait their turn) makes
the model call and the writes; a failure is logged and dropped. Recall is one embedding (local: a few ms on the
embedding pool) and one statement, plus one more to note what the turn was shown (docs/memories.md).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.store import insert_messages
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.llm.embeddings import embed_with_provider
from agent_runtime.engine.profiles.models import ProfileSettingsV1, ProfileSettingsV2
from agent_runtime.engine.user_memories.block import recall_block
from agent_runtime.engine.user_memories.embeddings import LOCAL_MODEL, Embedder, LiteLLMEmbedder, LocalEmbedder
from agent_runtime.engine.user_memories.extraction import (
    ExtractionTask,
    MemoryExtractor,
    embedding_rows,
    worth_extracting,
)
from agent_runtime.engine.user_memories.lanes import Lane
from agent_runtime.engine.user_memories.models import MemoryPage, RecalledMemory, TurnFacts
from agent_runtime.engine.user_memories.search_limits import SearchLimiter
from agent_runtime.engine.user_memories.store import MemoryStore
from agent_runtime.settings import Settings

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"[\u3400-\u9fff]|\w+|[^\w\s]")
# The forget tool deletes at most this many memories per request.
FORGET_LIMIT = 5


def approx_tokens(text: str) -> int:
    """Words, CJK characters and punctuation: an upper bound of most tokenizers' count, for the recall budget."""
    return len(_TOKEN.findall(text)) + 2


def build_embedder(settings: Settings) -> Embedder:
    if settings.memory_embedding_model == LOCAL_MODEL:
        return LocalEmbedder(threads=settings.memory_embedding_threads)
    price = settings.memory_embedding_price_cny_per_mtok
    return LiteLLMEmbedder(settings.memory_embedding_model, embed_with_provider, price_per_mtok=price)


def memories_enabled(settings: Settings, profile: ProfileSettingsV1 | ProfileSettingsV2) -> bool:
    """On for the service (USER_MEMORIES_ENABLED) and for this user (profile settings.memory.enabled)."""
    return settings.user_memories_enabled and (not isinstance(profile, ProfileSettingsV2) or profile.memory.enabled)


@dataclass(frozen=True)
class TurnRecall:
    """What a turn was shown: the recalled facts (in rank order) and what earlier turns of the session were shown,
    by message id; `rows`: the audit row of a paid embedding, for the run to write with its end."""

    hits: list[RecalledMemory]
    past: dict[str, list[str]]
    rows: list[NewMessage] = field(default_factory=list)

    def block_for(self, message_id: str, *, last: bool) -> str:
        """What the user message `message_id` ends with for the model: what its turn was shown."""
        if message_id in self.past:
            return recall_block(self.past[message_id])
        return recall_block([m.text for m in self.hits]) if last else ""


class MemoryService:
    def __init__(self, settings: Settings, pool: asyncpg.Pool, llm: Callable[[], LLMClient]) -> None:
        self._settings = settings
        self._pool = pool
        self._llm = llm
        self.store = MemoryStore(pool, build_embedder(settings))
        self._slots = asyncio.Semaphore(settings.user_memories_extraction_concurrency)
        self._searches = SearchLimiter(
            per_minute=settings.user_memories_searches_per_minute,
            at_once_per_user=settings.user_memories_searches_at_once_per_user,
            at_once=settings.user_memories_searches_at_once,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._task: ExtractionTask | None = None

    def configure(self, task: ExtractionTask) -> None:
        """The rendered `memory_extraction` task (from the YAML, which the run service holds)."""
        self._task = task

    def enabled(self, profile: ProfileSettingsV1 | ProfileSettingsV2) -> bool:
        return memories_enabled(self._settings, profile)

    # -- before a run --------------------------------------------------------------------------------
    async def recall(
        self, ctx: RequestContext, session_id: UUID, text: str, *, message_id: str, searched: bool = True
    ) -> TurnRecall:
        """The top memories for `text` within USER_MEMORIES_RECALL_K and _MAX_TOKENS, noted as shown to the turn
        `message_id` (its last user message), and what the session's earlier turns were shown. `searched=False`:
        the user has no memory (MemoryStore.recall)."""
        k = self._settings.user_memories_recall_k
        found = await self.store.recall(ctx, text, k=k, session_id=session_id, lane=Lane.RUN, searched=searched)
        budget = self._settings.user_memories_recall_max_tokens
        floor = (found.hits[0].similarity if found.hits else 0.0) - self._settings.user_memories_recall_margin
        hits: list[RecalledMemory] = []
        for hit in found.hits:
            if hit.similarity < floor:
                break  # ordered by similarity: the rest are further still
            budget -= approx_tokens(hit.text)
            if budget < 0:
                break
            hits.append(hit)
        if message_id in found.past:
            # A resumed turn: it was shown its memories when it began, and its request is repeated as it was.
            hits = []
        else:
            await self.store.record_recall(ctx, session_id, message_id, [m.id for m in hits])
        rows = embedding_rows(found.embedding.cost_cny, found.embedding.input_tokens, self.store, None)
        return TurnRecall(hits=hits, past=found.past, rows=rows)

    # -- after a run ---------------------------------------------------------------------------------
    def after_turn(self, ctx: RequestContext, facts: TurnFacts, *, end_user: str | None) -> None:
        """Start the turn's extraction in the background (never awaited by the run)."""
        if self._task is None or not worth_extracting(facts.user_text):
            return  # nothing said in the first person: no fact about the user to keep, no call
        task = asyncio.create_task(self._extract(ctx, facts, end_user), name=f"memories-{facts.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _extract(self, ctx: RequestContext, facts: TurnFacts, end_user: str | None) -> None:
        assert self._task is not None
        rows: list[NewMessage] = []
        try:
            async with self._slots:
                extractor = MemoryExtractor(
                    self._llm(),
                    self.store,
                    self._task,
                    max_chars=self._settings.user_memories_max_chars,
                    k=self._settings.user_memories_recall_k,
                )
                applied = await extractor.extract(ctx, facts, rows, end_user=end_user)
                log.info(
                    "memories extracted",
                    extra={
                        "run_id": facts.run_id,
                        "added": applied.added,
                        "updated": applied.updated,
                        "deleted": applied.deleted,
                        "dropped": applied.dropped,
                    },
                )
        except Exception:
            log.exception("memory extraction failed", extra={"run_id": facts.run_id})
        finally:
            if rows:
                try:
                    await insert_messages(self._pool, ctx, facts.session_id, rows)
                except Exception:
                    log.exception("could not record the memory extraction's cost", extra={"run_id": facts.run_id})

    async def wait_idle(self) -> None:
        """Until every extraction started so far is done (tests, benchmarks, shutdown)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def aclose(self, grace_seconds: float = 5.0) -> None:
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace_seconds)
            for task in pending:
                task.cancel()
        self.store.embedder.close()

    # -- the user's own view -------------------------------------------------------------------------
    async def page(self, ctx: RequestContext, *, limit: int, offset: int, q: str | None) -> MemoryPage:
        """A search (`q`) embeds the query, within the search limits (search_limits.py); a list does not."""
        if q is None:
            return await self.store.page(ctx, limit=limit, offset=offset, q=None)
        with self._searches.admit(ctx.user_id):
            return await self.store.page(ctx, limit=limit, offset=offset, q=q)

    async def delete(self, ctx: RequestContext, memory_id: UUID) -> None:
        await self.store.delete(ctx, memory_id)

    async def delete_all(self, ctx: RequestContext) -> int:
        return await self.store.delete_all(ctx)

    async def forget(self, ctx: RequestContext, what: str) -> list[str]:
        """The forget tool: delete the memories most like `what` (at least USER_MEMORIES_FORGET_MIN_SIMILARITY)."""
        return await self.store.forget(
            ctx, what, min_similarity=self._settings.user_memories_forget_min_similarity, limit=FORGET_LIMIT
        )
