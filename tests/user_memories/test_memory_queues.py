"""The embedding threads' lanes (a run's recall first) and the search limiter's buckets, at the engine level."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest

from agent_runtime.engine.errors import TooManySearchesError
from agent_runtime.engine.user_memories.embeddings import LocalEmbedder
from agent_runtime.engine.user_memories.lanes import Lane
from agent_runtime.engine.user_memories.search_limits import SearchLimiter


async def test_a_runs_recall_goes_ahead_of_searches_and_extractions() -> None:
    embedder = LocalEmbedder(threads=1)
    done: list[str] = []

    async def job(name: str, lane: Lane) -> None:
        await embedder.embed([name], "query", lane=lane)
        done.append(name)

    try:
        jobs = [asyncio.create_task(job(f"search {i}", Lane.SEARCH)) for i in range(10)]
        jobs += [asyncio.create_task(job(f"extraction {i}", Lane.EXTRACTION)) for i in range(3)]
        await asyncio.sleep(0)  # all of them wait for the thread, the first search on it
        jobs.append(asyncio.create_task(job("recall", Lane.RUN)))
        async with asyncio.timeout(30):
            await asyncio.gather(*jobs)
        assert done == [
            "search 0",
            "recall",
            *(f"extraction {i}" for i in range(3)),
            *(f"search {i}" for i in range(1, 10)),
        ]
    finally:
        embedder.close()


async def test_a_cancelled_wait_passes_its_turn_on() -> None:
    embedder = LocalEmbedder(threads=1)
    try:
        first = asyncio.create_task(embedder.embed(["a"], "query", lane=Lane.SEARCH))
        second = asyncio.create_task(embedder.embed(["b"], "query", lane=Lane.SEARCH))
        third = asyncio.create_task(embedder.embed(["c"], "query", lane=Lane.SEARCH))
        await asyncio.sleep(0)
        second.cancel()
        first.cancel()  # on the thread already: it ends there, and its slot is freed only then
        async with asyncio.timeout(30):
            assert len((await third).vectors) == 1
            assert len((await embedder.embed(["d"], "query", lane=Lane.RUN)).vectors) == 1
        assert second.cancelled() and first.cancelled()
    finally:
        embedder.close()


def test_the_buckets_refill_and_are_kept_for_a_bounded_number_of_users() -> None:
    now = [0.0]
    limiter = SearchLimiter(per_minute=3, at_once_per_user=1, at_once=10, clock=lambda: now[0], max_users=2)
    first = uuid4()
    for _ in range(3):
        with limiter.admit(first):
            pass
    with pytest.raises(TooManySearchesError) as refused:
        limiter.admit(first).__enter__()
    assert refused.value.retry_after == pytest.approx(20)
    now[0] += 20  # one search's worth refilled
    with limiter.admit(first):
        pass
    with pytest.raises(TooManySearchesError):
        limiter.admit(first).__enter__()
    # 3x as many other users as the limiter keeps buckets for: the first user's, the least recent, is forgotten
    # (a fresh, full bucket): the limiter's memory stays bounded.
    for _ in range(6):
        with limiter.admit(uuid4()):
            pass
    for _ in range(3):
        with limiter.admit(first):
            pass
