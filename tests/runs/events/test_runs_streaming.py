"""Over a real HTTP connection: RUN_STARTED comes at once and the answer arrives while the model is still writing it.

The model is held by the test (StubHold), not slowed by delays: "at once" means before the model has sent
a byte, and "while writing" means the client has part of the answer while the rest is still held back.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

import httpx
from tests.conftest import User
from tests.runs.conftest import Harness, intent_direct, warm_up
from tests.runs.events.test_runs_disconnect import served

ANSWER = "Streaming means the first words reach the reader while the model is still busy writing the last ones."
CHUNK_CHARS = 4


class Frames:
    """The SSE events of one response, read in the background; waits are on arrivals, not on time."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._arrived = asyncio.Condition()

    async def read(self, response: httpx.Response) -> None:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                async with self._arrived:
                    self.events.append(json.loads(line[len("data: ") :]))
                    self._arrived.notify_all()

    async def until(self, done: Callable[[list[dict[str, Any]]], bool]) -> None:
        async with asyncio.timeout(30), self._arrived:
            await self._arrived.wait_for(lambda: done(self.events))

    @staticmethod
    def text(events: list[dict[str, Any]]) -> str:
        return "".join(str(e["delta"]) for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_run_started_at_once_and_text_streams_token_by_token(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    await warm_up(h, make_user())
    reply = intent_direct(ANSWER, chunk_chars=CHUNK_CHARS)
    # Let the model write its JSON up to 12 characters into the answer: the head and role chunk, then
    # enough 4-character chunks.
    answer_starts = reply.content.index(ANSWER)
    content_chunks = math.ceil((answer_starts + 12) / CHUNK_CHARS)
    written = ANSWER[: content_chunks * CHUNK_CHARS - answer_starts]
    hold = h.stub.hold_replies()
    h.stub.enqueue(reply)

    frames = Frames()
    async with served(h.app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        request = http.stream("POST", f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi"})
        async with request as response:
            assert response.status_code == 200
            reader = asyncio.create_task(frames.read(response))
            await frames.until(lambda events: len(events) >= 1)
            async with asyncio.timeout(30):
                await h.stub.wait_for_requests(2)  # the warm-up run's and this run's
            # The model has been asked and has not answered: RUN_STARTED is already here, and no text.
            assert frames.events[0] == {
                "type": "RUN_STARTED",
                "threadId": sid,
                "runId": response.headers["x-run-id"],
                "protocolVersion": "1.0",
            }
            assert Frames.text(frames.events) == ""

            await hold.allow(1 + content_chunks)
            await frames.until(lambda events: Frames.text(events) == written)
            # The client reads the first words while the rest of the answer is still with the model.
            assert len(written) < len(ANSWER)
            assert [e["type"] for e in frames.events if e["type"] in ("TEXT_MESSAGE_END", "RUN_FINISHED")] == []

            await hold.release()
            await reader

    assert Frames.text(frames.events) == ANSWER
    # About one event per model chunk, not the answer in one piece.
    content = [e for e in frames.events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(content) >= len(ANSWER) // CHUNK_CHARS - 2
    assert frames.events[-1]["type"] == "RUN_FINISHED"
