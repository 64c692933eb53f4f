"""How many SQL statements a run costs (issue 9's target: at most 10 for a full run; it was 20, half of them
asyncpg's reset-on-release). Counted on the client side by wrapping asyncpg's two ways of sending a statement,
because the server's statistics are per database and flushed late; the lease keeper's renewals and sweeps
(one statement each per interval, for all of a process's runs) are left out."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from tests.conftest import User
from tests.runs.conftest import Harness, execution_done, intent_direct, intent_needs, organized, types, warm_up
from tests.stubs.deepseek_stub import StubReply, StubToolCall

_KEEPER = ("WITH expired AS", "UPDATE agent_chat_sessions SET lease_expires_at")


def _kind(sql: str) -> str:
    text = " ".join(sql.split())
    if "INSERT INTO agent_runs" in text:
        return "start"
    if "UPDATE agent_runs SET status" in text:
        return "finish"
    if "tail AS (" in text:  # the memory window read (engine/conversation/repository.py)
        return "window"
    if "SELECT * FROM ( SELECT" in text and "ORDER BY seq DESC LIMIT" in text:
        return "snapshot"
    if "SELECT pending_turn, client_state" in text:
        return "thread"
    if "INSERT INTO agent_run_events" in text:
        return "events"
    if "INSERT INTO agent_chat_messages" in text:
        return "append"
    if "SET resume_point" in text:
        return "resume point"
    if "SET run_reserved_cny = run_reserved_cny +" in text:
        return "hold"
    if "WITH run AS (" in text and "FROM agent_run_events" in text:
        return "log page"
    return text[:80]


def _ids(args: tuple[Any, ...]) -> set[UUID]:
    """The UUIDs among a statement's arguments (asyncpg's `_execute` gets them as one tuple; arrays are lists)."""
    found: set[UUID] = set()
    for arg in args:
        items = arg if isinstance(arg, tuple | list) else [arg]
        for item in items:
            if isinstance(item, UUID):
                found.add(item)
            elif isinstance(item, list):
                found.update(i for i in item if isinstance(i, UUID))
    return found


@contextmanager
def counted_statements(monkeypatch: pytest.MonkeyPatch, session_id: str) -> Iterator[list[str]]:
    """The statements of the session's run: those naming the session, its user or its run (which the start names).
    Other engines of this test process (the suite's shared app, a test's leftover background work) are left out."""
    seen: list[tuple[str, set[UUID]]] = []
    execute, execute_params = asyncpg.Connection.execute, asyncpg.Connection._execute

    async def counting_execute(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        if not args:  # with arguments it goes through _execute, counted there
            seen.append((query, set()))
        return await execute(self, query, *args, **kwargs)

    async def counting_execute_params(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((query, _ids(args)))
        return await execute_params(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", counting_execute)
    monkeypatch.setattr(asyncpg.Connection, "_execute", counting_execute_params)
    statements: list[str] = []
    try:
        yield statements
    finally:
        monkeypatch.undo()
        session = UUID(session_id)
        named = set().union(*(ids for _, ids in seen if session in ids))
        statements.extend(_kind(sql) for sql, ids in seen if ids & named and not sql.lstrip().startswith(_KEEPER))


async def test_a_full_run_with_a_tool_call_is_ten_statements_and_a_direct_one_six(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_user()
    await warm_up(h, user)
    await h.engine.runs.wait_idle()
    sid = await h.new_session(user)
    call = StubToolCall(id="call_1", name="calculator", arguments='{"expression": "6*7"}')
    h.stub.enqueue(
        intent_needs("Compute 6*7."),
        StubReply(tool_calls=[call]),
        execution_done("42", {"result": "42"}),
        organized("It is 42."),
    )
    with counted_statements(monkeypatch, sid) as full:
        result = await h.run(user, sid, "what is 6*7?")
        await h.engine.runs.wait_idle()
    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    # start (session, lease, run row, input row, profile, the pending turn it takes); the thread for the
    # MESSAGES_SNAPSHOT; the memory window; the tool call's row; the tool result's row (written before the
    # next model call); the budget hold's growth before the first call and before the organization's (a user
    # with a completed run is admitted holding twice what it cost, less than a call's worst case, and the hold
    # grows by exactly what the next call misses: engine/runs/ledger/reservation.py); the end (rows, status,
    # run row, totals, what the session waits for); the event log, written once, with its terminal event
    # (nobody followed the run from another replica); and the intent it decided, before the execution stage begins
    # (what another process resumes the turn from if this one dies: engine/runs/takeover/).
    assert full == [
        "start",
        "snapshot",
        "window",
        "hold",
        "resume point",
        "append",
        "append",
        "hold",
        "finish",
        "events",
    ]

    h.stub.enqueue(intent_direct("hi"))
    with counted_statements(monkeypatch, sid) as direct:
        result = await h.run(user, sid, "hello")
        await h.engine.runs.wait_idle()
    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    assert direct == ["start", "snapshot", "window", "hold", "finish", "events"]

    # Over AG-UI, one read first: the thread's pending turn, state, and which of the client's ids it stores.
    h.stub.enqueue(intent_direct("hi again"))
    body = {"threadId": sid, "runId": "r", "messages": [{"id": "m-agui", "role": "user", "content": "hey"}]}
    with counted_statements(monkeypatch, sid) as agui:
        result = await h.agui(user, body)
    assert types(result.events)[-1] == "RUN_FINISHED", result.body
    assert agui == ["thread", "start", "snapshot", "window", "hold", "finish", "events"]


async def test_resuming_a_finished_run_is_one_statement_whether_it_replays_all_or_nothing(
    h: Harness, make_user: Callable[[], User], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = make_user()
    await warm_up(h, user)
    sid = await h.new_session(user)
    h.stub.enqueue(intent_direct("hi"))
    result = await h.run(user, sid, "hello")
    await h.engine.runs.wait_idle()
    run_id = result.run_id
    url = f"/v1/sessions/{sid}/runs/{run_id}/events"
    with counted_statements(monkeypatch, sid) as replay:
        whole = await h.client.get(url, headers=user.headers)
    assert whole.text == result.body
    # The ownership check, the run's state and its log are read together; nothing else.
    assert replay == ["log page"]

    last = len(result.events)
    with counted_statements(monkeypatch, sid) as nothing_left:
        done = await h.client.get(url, headers={**user.headers, "Last-Event-ID": f"{run_id}:{last}"})
    assert (done.status_code, done.text) == (200, "")
    assert nothing_left == ["log page"]
