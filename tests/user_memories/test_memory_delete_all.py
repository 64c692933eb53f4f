"""A delete-all that commits wins over every extraction in flight (issue 32): the owner's generation, bumped by the
delete-all in its transaction, read by the run's start statement, checked by the extraction's writes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import uuid4

import pytest
from tests.conftest import User
from tests.runs.conftest import Harness, MakeHarness, intent_direct, make_harness, stage_request_text
from tests.stubs.deepseek_stub import RecordedRequest, StubReply

from agent_runtime.engine.context import RequestContext

__all__ = ["make_harness"]

FACT = "The user lives in Oslo."


def _is_extraction(request: RecordedRequest) -> bool:
    return any("MemoryExtraction" in str(m.get("content") or "") for m in request.messages if m.get("role") == "system")


@pytest.fixture
async def sh(make_harness: MakeHarness) -> AsyncIterator[Harness]:
    async with make_harness(user_memories_enabled=True) as harness:
        yield harness


async def _memories(h: Harness, user: User) -> dict[str, Any]:
    response = await h.client.get("/v1/memories", headers=user.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_delete_all_during_the_extraction_call_is_not_undone(
    sh: Harness, make_user: Callable[[], User]
) -> None:
    def reply(request: RecordedRequest) -> StubReply:
        if _is_extraction(request):  # the extraction's model call is slow: the user deletes all meanwhile
            return StubReply(content=json.dumps({"operations": [{"action": "add", "fact": FACT}]}), delay_seconds=1.0)
        return intent_direct(f"echo: {stage_request_text(request)[:30]}")

    sh.stub.responder = reply
    user = make_user()
    result = await sh.run(user, await sh.new_session(user), "I live in Oslo.")
    assert result.status == 200 and result.of_type("RUN_FINISHED"), result.body
    async with asyncio.timeout(10):
        await sh.stub.wait_for_requests(2)  # the run's call, then the extraction's, now in flight
    assert _is_extraction(sh.stub.requests[-1])
    assert (await sh.client.delete("/v1/memories", headers=user.headers)).status_code == 204
    await sh.engine.runs.wait_idle()
    await sh.engine.memories.wait_idle()
    assert await _memories(sh, user) == {"items": [], "total": 0, "limit": 20, "offset": 0}

    # The next turn started after the delete-all: its facts are kept.
    again = await sh.run(user, await sh.new_session(user), "I live in Oslo.")
    assert again.status == 200 and again.of_type("RUN_FINISHED"), again.body
    await sh.engine.runs.wait_idle()
    await sh.engine.memories.wait_idle()
    assert [m["text"] for m in (await _memories(sh, user))["items"]] == [FACT]


async def test_a_delete_all_during_the_run_wins_over_its_extraction(sh: Harness, make_user: Callable[[], User]) -> None:
    def reply(request: RecordedRequest) -> StubReply:
        if _is_extraction(request):
            return StubReply(content=json.dumps({"operations": [{"action": "add", "fact": FACT}]}))
        return intent_direct(f"echo: {stage_request_text(request)[:30]}", delay_seconds=1.0)

    sh.stub.responder = reply
    user = make_user()
    sid = await sh.new_session(user)
    run = asyncio.create_task(sh.run(user, sid, "I live in Oslo."))
    async with asyncio.timeout(30):
        await sh.stub.wait_for_requests(1)  # the run started and waits for its answer
    assert (await sh.client.delete("/v1/memories", headers=user.headers)).status_code == 204
    result = await run
    assert result.status == 200 and result.of_type("RUN_FINISHED"), result.body
    await sh.engine.runs.wait_idle()
    await sh.engine.memories.wait_idle()
    assert len([r for r in sh.stub.requests if _is_extraction(r)]) == 1  # the extraction ran; its write did not
    assert (await _memories(sh, user))["total"] == 0


async def test_an_extraction_write_racing_a_delete_all_never_survives_it(sh: Harness) -> None:
    """Store level, many times over: a write made with the generation read before a delete-all never outlives the
    delete-all, whichever statement reaches the database first (each on its own connection)."""
    store = sh.engine.memories.store
    vector = [1.0] + [0.0] * 383
    ctx = RequestContext(user_id=uuid4())
    for generation in range(40):
        added, _ = await asyncio.gather(
            store.add(ctx, FACT, sources=[], session_id=None, vector=vector, generation=generation),
            store.delete_all(ctx),
        )
        assert (await store.page(ctx, limit=10, offset=0, q=None)).total == 0, (generation, added)
    # With the generation now in force, a write lands.
    assert await store.add(ctx, FACT, sources=[], session_id=None, vector=vector, generation=40) is not None
    assert (await store.page(ctx, limit=10, offset=0, q=None)).total == 1
