"""Over a real HTTP connection: RUN_STARTED comes at once and the answer arrives while the model is still writing it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
from tests.conftest import User
from tests.runs.conftest import Harness, intent_direct, warm_up
from tests.runs.test_runs_disconnect import served

ANSWER = "Streaming means the first words reach the reader while the model is still busy writing the last ones."
CHUNK_DELAY = 0.04


async def test_run_started_at_once_and_text_streams_token_by_token(h: Harness, make_user: Callable[[], User]) -> None:
    user = make_user()
    sid = await h.new_session(user)
    await warm_up(h, make_user())
    # The model takes 0.5 s to its first token, then writes 4 characters every 40 ms (~1.3 s for this reply).
    h.stub.enqueue(intent_direct(ANSWER, delay_seconds=0.5, chunk_chars=4, chunk_delay_seconds=CHUNK_DELAY))

    arrivals: list[tuple[float, dict[str, object]]] = []
    async with served(h.app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        started = time.perf_counter()
        request = http.stream("POST", f"/v1/sessions/{sid}/runs", headers=user.headers, json={"message": "hi"})
        async with request as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    arrivals.append((time.perf_counter() - started, json.loads(line[len("data: ") :])))

    assert arrivals[0][1]["type"] == "RUN_STARTED"
    assert arrivals[0][0] < 0.3  # before the model has said anything
    content = [(t, e) for t, e in arrivals if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "".join(str(e["delta"]) for _, e in content) == ANSWER
    # About one event per model chunk (4 characters), spread over the model's writing time, not in one burst.
    assert len(content) >= len(ANSWER) // 4 - 2
    first, last = content[0][0], content[-1][0]
    assert last - first > (len(ANSWER) // 4 - 2) * CHUNK_DELAY * 0.8
    assert first < arrivals[-1][0] - 1.0
    assert arrivals[-1][1]["type"] == "RUN_FINISHED"
