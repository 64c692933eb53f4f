"""Memory searches (`GET /v1/memories?q=`) within limits: per user in flight and per minute (429
`too_many_searches`), per process in flight (503 `search_busy`), each at 3x its size, refused at once with a JSON
body and `Retry-After`; a list without `q` embeds nothing and is not limited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, make_harness

from agent_runtime.engine.user_memories.embeddings import Embedder, Embeddings

__all__ = ["make_harness"]

DEMO = {"llm_model": None, "deepseek_api_key": None, "llm_api_base": None, "user_memories_enabled": True}


class HeldQueries:
    """The app's embedder, with every query embedding held until `release`: searches stay in flight."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.model = inner.model
        self.waiting = 0
        self._go = asyncio.Event()
        self._changed = asyncio.Condition()

    async def embed(self, texts: Sequence[str], purpose: Any, **options: Any) -> Embeddings:
        if purpose == "query":
            async with self._changed:
                self.waiting += 1
                self._changed.notify_all()
            await self._go.wait()
        return await self._inner.embed(texts, purpose, **options)

    async def until_waiting(self, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.waiting >= count)

    def release(self) -> None:
        self._go.set()

    def close(self) -> None:
        self._inner.close()


def refusal(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The refusal's whole body, checked: the one error shape, the code, no details, a Retry-After."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body == {
        "error": {
            "code": code,
            "message": body["error"]["message"],
            "details": [],
            "request_id": response.headers["x-request-id"],
            "error_id": None,
        }
    }
    assert int(response.headers["retry-after"]) >= 1
    return body


async def settle(flights: list[asyncio.Task[httpx.Response]], answered: int, held: HeldQueries, waiting: int) -> None:
    """Until `answered` of the searches have their answer and `waiting` are held in flight."""
    async with asyncio.timeout(10):
        pending = set(flights)
        while len(flights) - len(pending) < answered:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await held.until_waiting(waiting)


async def search(h: Harness, user: User, q: str) -> httpx.Response:
    return await h.client.get("/v1/memories", headers=user.headers, params={"q": q})


async def test_a_users_searches_per_minute(make_harness: MakeHarness, make_user: Callable[[], User]) -> None:
    async with make_harness(**DEMO, user_memories_searches_per_minute=3) as h:
        user, other = make_user(), make_user()
        answers = [await search(h, user, f"where do I live {i}") for i in range(9)]
        assert [r.status_code for r in answers] == [200] * 3 + [429] * 6
        for response in answers[3:]:
            body = refusal(response, 429, "too_many_searches")
            assert body["error"]["message"] == "at most 3 memory searches a minute; retry in 20 s"
            assert response.headers["retry-after"] == "20"  # one search's worth of the bucket, at 3 a minute
        assert (await search(h, other, "where do I live")).status_code == 200  # another user's bucket is full
        listed = [await h.client.get("/v1/memories", headers=user.headers) for _ in range(9)]
        assert {r.status_code for r in listed} == {200}  # a list without q embeds nothing and is not limited


async def test_a_users_searches_in_flight(make_harness: MakeHarness, make_user: Callable[[], User]) -> None:
    async with make_harness(**DEMO, user_memories_searches_at_once_per_user=2) as h:
        held = HeldQueries(h.engine.memories.store.embedder)
        h.engine.memories.store.embedder = held  # type: ignore[assignment]
        user, other = make_user(), make_user()
        flights = [asyncio.create_task(search(h, user, f"q{i}")) for i in range(6)]
        await settle(flights, 4, held, 2)
        # Refused while two are held in flight: the refusals waited for nothing.
        refused = [f.result() for f in flights if f.done()]
        in_flight = [f for f in flights if not f.done()]
        assert len(refused) == 4 and len(in_flight) == 2 and held.waiting == 2
        for response in refused:
            body = refusal(response, 429, "too_many_searches")
            assert body["error"]["message"] == (
                "2 of your memory searches are in flight, the most one user may; retry when one is done"
            )
        theirs = asyncio.create_task(search(h, other, "mine"))  # another user is not refused
        async with asyncio.timeout(10):
            await held.until_waiting(3)
        held.release()
        assert [r.status_code for r in await asyncio.gather(*in_flight, theirs)] == [200] * 3
        assert (await search(h, user, "again")).status_code == 200  # their slots are free once they are done


async def test_the_process_searches_in_flight(make_harness: MakeHarness, make_user: Callable[[], User]) -> None:
    async with make_harness(**DEMO, user_memories_searches_at_once=3) as h:
        held = HeldQueries(h.engine.memories.store.embedder)
        h.engine.memories.store.embedder = held  # type: ignore[assignment]
        users = [make_user() for _ in range(9)]
        flights = [asyncio.create_task(search(h, u, "where do I live")) for u in users]
        await settle(flights, 6, held, 3)
        refused = [f.result() for f in flights if f.done()]
        in_flight = [f for f in flights if not f.done()]
        assert len(refused) == 6 and len(in_flight) == 3 and held.waiting == 3
        for response in refused:
            body = refusal(response, 503, "search_busy")
            assert body["error"]["message"] == "this server runs as many memory searches as it may (3); retry shortly"
        held.release()
        assert [r.status_code for r in await asyncio.gather(*in_flight)] == [200] * 3
