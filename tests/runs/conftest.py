"""Fixtures for end-to-end run tests: the app pointed at the local DeepSeek stub (never a hosted API).

Every test gets its own stub server and its own app (lifespan run, own pool), so scripted replies, the
request log and settings overrides never leak between tests. Runs are sequential within one test unless
the test says otherwise, so the stub's FIFO queue scripts one run's model calls in order.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import yaml
from fastapi import FastAPI
from pydantic import SecretStr
from tests.conftest import User
from tests.stubs.deepseek_stub import DeepSeekStub, RecordedRequest, StubHold, StubReply, StubUsage
from tests.stubs.summaries import summary_reply
from tests.support.rows import stored_rows

from agent_runtime.api.app import create_app
from agent_runtime.api.sse import KEEPALIVE
from agent_runtime.engine.conversation.metadata import AssistantOutputMetadata, UserInputMetadata
from agent_runtime.engine.conversation.stored_messages import NewMessage, StoredMessage
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.resources import default_config_dir
from agent_runtime.settings import Settings

STUB_API_KEY = "test-key"
MODEL = "deepseek/deepseek-flash"
STAGES = ("intent", "execution", "organization")
# Model calls are priced at their start (config/pricing.yaml): the runs' clock is pinned to a Tuesday, 10:30 in
# Beijing, so deepseek-flash's peak prices apply (CNY per million tokens).
PEAK_TIME = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
PRICE_CACHE_HIT = Decimal("0.04")
PRICE_CACHE_MISS = Decimal("2")
PRICE_OUTPUT = Decimal("8")
# How a billed row says what it was charged at (its price list entry and tier), and a row that bills nothing.
PEAK_PRICE = {"price_tier": "peak", "price_effective_from": "2026-12-01T00:00:00Z"}
NO_PRICE = {"price_tier": None, "price_effective_from": None}
# The repair turn's first words (engine/flow/crewai/wire.py).
REPAIR_START = "Your previous answer could not be used"
# What the flow appends to the user's turn in the intent call (engine/flow/prompt.py CONTRACT_LINE).
INTENT_CONTRACT_LINE = "\n\nAnswer as the intent stage: only the IntentResult JSON object."


def cny_cost(prompt: int, completion: int, cache_hit: int = 0) -> Decimal:
    """The custom-pricing cost of one call, by hand from the price table."""
    total = cache_hit * PRICE_CACHE_HIT + (prompt - cache_hit) * PRICE_CACHE_MISS + completion * PRICE_OUTPUT
    return total / Decimal(1_000_000)


def money(value: Decimal) -> str:
    """A cost as the API and the stored rows render it (10 decimal places)."""
    return format(value.quantize(Decimal("1E-10")), "f")


def _user_texts(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.messages if m.get("role") == "user" and isinstance(m.get("content"), str)]


def stage_of(request: RecordedRequest) -> str:
    """The flow stage a model request belongs to (engine/flow/prompt.py): the `Stage: <name>` line of the last stage
    request in it; a call without one is the intent stage's (its request is the user's turn itself). A JSON repair
    turn comes after the request either way. The schemas of all stages are in the system prompt, so they no longer
    tell stages apart."""
    for content in reversed(_user_texts(request)):
        first_line = content.split("\n", 1)[0]
        for stage in STAGES:
            if first_line == f"Stage: {stage}":
                return stage
    if not request.messages or request.messages[0].get("role") != "system":
        raise AssertionError(f"not a stage call: {request.messages!r}")
    return "intent"


def stage_request_text(request: RecordedRequest) -> str:
    """The user's turn the call answers: its last user message that is neither a stage request nor a repair turn,
    without the line the flow closes it with (the intent contract's)."""
    for content in reversed(_user_texts(request)):
        if not content.startswith(("Stage: ", REPAIR_START)):
            return content.removesuffix(INTENT_CONTRACT_LINE)
    raise AssertionError(f"no user turn in: {request.messages!r}")


def intent_direct(text: str, **reply: Any) -> StubReply:
    payload = {"route": "DIRECT_EXECUTION", "assistant_text": text, "intent_summary": "chat", "safety_flags": []}
    return StubReply(content=json.dumps(payload, ensure_ascii=False), **reply)


def intent_needs(brief: str, **reply: Any) -> StubReply:
    payload = {
        "route": "NEEDS_EXECUTION",
        "assistant_text": None,
        "intent_summary": "arithmetic",
        "execution_brief": brief,
        "safety_flags": [],
    }
    return StubReply(content=json.dumps(payload), **reply)


def execution_done(summary: str, data: dict[str, Any], **reply: Any) -> StubReply:
    payload = {"status": "SUCCESS", "execution_summary": summary, "execution_data": data, "report_brief": summary}
    return StubReply(content=json.dumps(payload), **reply)


def organized(text: str, **reply: Any) -> StubReply:
    return StubReply(content=json.dumps({"assistant_text": text, "response_metadata": {}}, ensure_ascii=False), **reply)


def usage(prompt: int, completion: int, cache_hit: int = 0) -> StubUsage:
    return StubUsage(prompt_tokens=prompt, completion_tokens=completion, cache_hit_tokens=cache_hit)


def default_responder(request: RecordedRequest) -> StubReply:
    """Used when nothing is queued: answer every run directly, quoting the user's message (and the memory's summary
    task extractively, as the demo model does)."""
    return summary_reply(request) or intent_direct(f"echo: {stage_request_text(request)}")


def parse_sse(body: str) -> list[dict[str, Any]]:
    """`id: <run_id>:<seq>\\ndata: <json>\\n\\n` frames into event dicts. Anything else in the body fails the
    test, and so do ids that are not one run's 1, 2, 3, ... in order (a resumed stream: see `sse_frames`)."""
    frames = sse_frames(body)
    run_ids = {run_id for run_id, _, _ in frames}
    assert len(run_ids) <= 1, run_ids
    assert [seq for _, seq, _ in frames] == list(range(1, len(frames) + 1)), [seq for _, seq, _ in frames]
    return [event for _, _, event in frames]


def sse_frames(body: str) -> list[tuple[str, int, dict[str, Any]]]:
    """(run id, seq, event) of every frame, checking each is exactly an `id:` line and a `data:` line. Keepalive
    comments are skipped: a run slower than SSE_KEEPALIVE_SECONDS (a cold first warm-up) has them."""
    assert body.endswith("\n\n"), body[-200:]
    frames = []
    for frame in body[:-2].split("\n\n"):
        if frame + "\n\n" == KEEPALIVE:
            continue
        id_line, data_line = frame.split("\n")
        assert id_line.startswith("id: ") and data_line.startswith("data: "), frame
        run_id, seq = id_line[len("id: ") :].split(":")
        frames.append((run_id, int(seq), json.loads(data_line[len("data: ") :])))
    return frames


def row_dict(row: StoredMessage) -> dict[str, Any]:
    """A stored row as JSON, without the values the database generates (id, session, timestamp)."""
    return row.model_dump(mode="json", exclude={"id", "session_id", "created_at"})


def text_messages(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each streamed text message's full text by id, checking the stream's framing on the way: content only
    inside an open message, one START and one END per id, every message closed before the run ends."""
    texts: dict[str, str] = {}
    open_id: str | None = None
    for event in events:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START":
            assert open_id is None and event["messageId"] not in texts, event
            open_id = event["messageId"]
            texts[open_id] = ""
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert event["messageId"] == open_id and event["delta"], event
            texts[open_id] += event["delta"]
        elif kind == "TEXT_MESSAGE_END":
            assert event["messageId"] == open_id, event
            open_id = None
        elif kind in ("TOOL_CALL_START", "RUN_FINISHED", "RUN_ERROR"):
            assert open_id is None, event
    return texts


def run_error_id(event: dict[str, Any], code: str, message: str) -> str:
    """Checks a RUN_ERROR event whole (its message is `message` plus the error_id) and returns the error_id."""
    match = re.fullmatch(re.escape(message) + r" \(error_id ([0-9a-f]{32})\)", str(event.get("message")))
    assert match is not None, event
    assert event == {"type": "RUN_ERROR", "code": code, "message": event["message"]}
    return match.group(1)


async def wait_for_model_call(stub: DeepSeekStub) -> None:
    """Until the stub has received a request; up to 30 s, as a run alone in its test first loads CrewAI."""
    async with asyncio.timeout(30):
        await stub.wait_for_requests()


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


# Every run starts with the thread as stored and the run state; a stage's start updates the state; a
# completed run ends with its cost, the final run state and RUN_FINISHED.
RUN_START = ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
STAGE_START = ["STEP_STARTED", "STATE_DELTA"]
RUN_END = ["CUSTOM", "STATE_DELTA", "RUN_FINISHED"]


def run_cost(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The `run_cost` CUSTOM event's value."""
    (event,) = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "run_cost"]
    value: dict[str, Any] = event["value"]
    return value


@dataclass
class RunResult:
    status: int
    headers: httpx.Headers
    body: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.headers["x-run-id"]

    def of_type(self, *names: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] in names]


@dataclass
class HeldRun:
    session_id: str
    hold: StubHold
    result: asyncio.Task[RunResult]


@dataclass
class Harness:
    """One app on one stub: HTTP client, engine and helpers."""

    app: FastAPI
    stub: DeepSeekStub
    client: httpx.AsyncClient
    settings: Settings

    @property
    def engine(self) -> RuntimeEngine:
        engine: RuntimeEngine = self.app.state.engine
        return engine

    async def new_session(self, user: User) -> str:
        response = await self.client.post("/v1/sessions", headers=user.headers, json={})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    async def held_run(self, user: User, answer: str) -> HeldRun:
        """A run of "hello" in a new session, in its model call, which waits on the stub's hold: until the hold is
        released, only something else ends the run (a drain, a lost lease)."""
        await self.engine.runs.ensure_warm()  # LiteLLM and CrewAI loaded: the run reaches the model soon
        sid = await self.new_session(user)
        hold = self.stub.hold_replies()
        self.stub.enqueue(intent_direct(answer))
        result = asyncio.create_task(self.run(user, sid, "hello"))
        await wait_for_model_call(self.stub)
        return HeldRun(session_id=sid, hold=hold, result=result)

    async def run(self, user: User, session_id: str, message: str, **body: Any) -> RunResult:
        response = await self.client.post(
            f"/v1/sessions/{session_id}/runs", headers=user.headers, json={"message": message, **body}
        )
        return self._result(response)

    async def run_body(self, user: User, session_id: str, body: dict[str, Any]) -> RunResult:
        """A REST run with any body (`run` sends a message)."""
        response = await self.client.post(f"/v1/sessions/{session_id}/runs", headers=user.headers, json=body)
        return self._result(response)

    async def agui(self, user: User | None, payload: dict[str, Any]) -> RunResult:
        headers = user.headers if user is not None else {}
        return self._result(await self.client.post("/v1/agui", headers=headers, json=payload))

    @staticmethod
    def _result(response: httpx.Response) -> RunResult:
        result = RunResult(response.status_code, response.headers, response.text)
        if response.status_code == 200:
            assert response.headers["content-type"].startswith("text/event-stream")
            result.events = parse_sse(response.text)
        return result

    async def session(self, user: User, session_id: str) -> dict[str, Any]:
        response = await self.client.get(f"/v1/sessions/{session_id}", headers=user.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def rows(self, user: User, session_id: str) -> list[StoredMessage]:
        """Every stored row of the session, audit rows included, visible ones first, each in seq order."""
        rows = await stored_rows(self.engine.pool, user.ctx, UUID(session_id))
        return sorted(rows, key=lambda r: (r.seq < 0, abs(r.seq)))

    async def visible(self, user: User, session_id: str) -> list[dict[str, Any]]:
        response = await self.client.get(f"/v1/sessions/{session_id}/messages", headers=user.headers)
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # CrewAI reads its own deprecated fields on every Agent construction (as in tests/flow).
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai.*"))


# A window that cuts within a few turns (the shipped one is long: settings.py says why), for the tests of cuts.
SHORT_WINDOW = {
    "memory_max_messages": 20,
    "memory_max_tokens": 8000,
    "memory_low_messages": 10,
    "memory_low_tokens": 4000,
    "memory_summary": True,
}


async def long_session(h: Harness, user: User) -> str:
    """A session whose stored history (15 answered turns) fills SHORT_WINDOW: its next run cuts it."""
    sid = await h.new_session(user)
    earlier: list[NewMessage] = []
    for turn in range(15):
        earlier.append(NewMessage(role="user", content=f"question {turn}", metadata=UserInputMetadata()))
        earlier.append(NewMessage(role="assistant", content=f"answer {turn}", metadata=AssistantOutputMetadata()))
    await h.engine.messages.append(user.ctx, UUID(sid), earlier)
    return sid


async def warm_up(h: Harness, user: User) -> None:
    """One quick run, on its own session: CrewAI and LiteLLM are loaded (once per process) after it."""
    result = await h.run(user, await h.new_session(user), "warm-up")
    assert types(result.events)[-1] == "RUN_FINISHED", result.body


def crewai_config(tmp_path: Path, **tasks: dict[str, Any]) -> Path:
    """A copy of the shipped config/crewai with `tasks.yaml`'s tasks updated, e.g. `execution={"thinking":
    "enabled"}`; pass it as `crewai_config_dir`."""
    config = tmp_path / "crewai"
    shutil.copytree(default_config_dir() / "crewai", config)
    tasks_file = config / "tasks.yaml"
    loaded = yaml.safe_load(tasks_file.read_text(encoding="utf-8"))
    for name, values in tasks.items():
        loaded[name].update(values)
    tasks_file.write_text(yaml.safe_dump(loaded, allow_unicode=True), encoding="utf-8")
    return config


THINKING = {"thinking": "enabled"}

MakeHarness = Callable[..., AbstractAsyncContextManager[Harness]]


@pytest.fixture
def make_harness(settings: Settings) -> MakeHarness:
    """`async with make_harness(run_timeout_seconds=1) as h:` an app on a fresh stub; kwargs override settings,
    `clock` is when the app's model calls start (for their prices; default: a peak hour), `tools` are registered
    beside the built-in ones."""

    @asynccontextmanager
    async def build(
        clock: Callable[[], datetime] = lambda: PEAK_TIME, tools: Sequence[Tool[Any]] = (), **overrides: Any
    ) -> AsyncIterator[Harness]:
        async with DeepSeekStub(api_key=STUB_API_KEY, responder=default_responder) as stub:
            values: dict[str, Any] = {
                "environment": "test",
                "llm_model": MODEL,
                "llm_api_base": stub.base_url,
                "deepseek_api_key": SecretStr(STUB_API_KEY),
                "openai_api_key": None,
                "llm_timeout_seconds": 5.0,
                "llm_connect_timeout_seconds": 2.0,
                "llm_max_retries": 2,
                "llm_retry_base_seconds": 0.01,
                "llm_retry_max_seconds": 0.02,
                "run_timeout_seconds": 120.0,  # the first run of a process waits for the CrewAI import
                "db_pool_max_size": 10,
            }
            values.update(overrides)
            app_settings = settings.model_copy(update=values)
            app = create_app(app_settings, clock=clock, tools=tools)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
                    yield Harness(app=app, stub=stub, client=client, settings=app_settings)

    return build


@pytest.fixture
async def h(make_harness: MakeHarness) -> AsyncIterator[Harness]:
    async with make_harness() as harness:
        yield harness


def client_messages(events: list[dict[str, Any]], initial: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The messages an AG-UI client holds after applying `events` to `initial`, as `@ag-ui/client`'s
    `defaultApplyEvents` does (text, tool calls and results, reasoning, MESSAGES_SNAPSHOT reconciliation)."""
    messages = [dict(m) for m in initial or []]

    def find(message_id: str) -> dict[str, Any] | None:
        return next((m for m in messages if m["id"] == message_id), None)

    for event in events:
        kind = event["type"]
        if kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START") and find(event["messageId"]) is None:
            role = "reasoning" if kind == "REASONING_MESSAGE_START" else event.get("role", "assistant")
            messages.append({"id": event["messageId"], "role": role, "content": ""})
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            target = find(event["messageId"])
            assert target is not None, event
            target["content"] += event["delta"]
        elif kind == "TOOL_CALL_START":
            parent = find(event.get("parentMessageId") or event["toolCallId"])
            if parent is None:
                parent = {"id": event.get("parentMessageId") or event["toolCallId"], "role": "assistant"}
                messages.append(parent)
            call = {"id": event["toolCallId"], "type": "function", "function": {"name": event["toolCallName"]}}
            call["function"]["arguments"] = ""
            parent.setdefault("toolCalls", []).append(call)
        elif kind == "TOOL_CALL_ARGS":
            calls = [c for m in messages for c in m.get("toolCalls", []) if c["id"] == event["toolCallId"]]
            calls[0]["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            result = {"id": event["messageId"], "role": "tool", "toolCallId": event["toolCallId"]}
            result["content"] = event["content"]
            owner = [
                i for i, m in enumerate(messages) if any(c["id"] == event["toolCallId"] for c in m.get("toolCalls", []))
            ]
            at = owner[0] + 1 if owner else len(messages)
            while at < len(messages) and messages[at]["role"] == "tool":
                at += 1
            messages.insert(at, result)
        elif kind == "MESSAGES_SNAPSHOT":
            snapshot = {m["id"]: m for m in event["messages"]}
            keep_reasoning = not any(m["role"] == "reasoning" for m in event["messages"])
            kept = [
                snapshot.get(m["id"], m)
                for m in messages
                if m["id"] in snapshot or (keep_reasoning and m["role"] == "reasoning")
            ]
            known = {m["id"] for m in kept}
            messages = kept + [m for m in event["messages"] if m["id"] not in known]
    return messages
