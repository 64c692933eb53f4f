"""A client reconnecting to a thread: a hydrate (agui/input.py says which inputs are one; docs/api.md,
"Reconnecting to a thread"). Nothing runs, and nothing is stored or billed:

- the thread has a live run: the stream is that run's own (its event log, `events/hub.py`), from its start
  (RUN_STARTED, MESSAGES_SNAPSHOT, STATE_SNAPSHOT, ...), or after the client's `Last-Event-ID` when that names
  the run, to the run's end; any replica serves it;
- otherwise it is made here: RUN_STARTED, MESSAGES_SNAPSHOT, STATE_SNAPSHOT (the client's stored state and the
  latest run's `agentRuntime` as that run left it) and RUN_FINISHED, carrying what the thread waits for: the
  interrupts and pending frontend tool calls its suspended run's RUN_FINISHED carried, so the client asks for
  them again and can resume.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

from ag_ui.core import RunErrorEvent, RunFinishedEvent
from pydantic import JsonValue

from agent_runtime.engine.conversation.chat_messages import ChatMessage
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runs.agui.mapper import to_agui
from agent_runtime.engine.runs.events.log import LoggedEvent
from agent_runtime.engine.runs.events.state import RUN_STATE_KEY, RunState, RunStatus
from agent_runtime.engine.runs.events.types import MessagesSnapshot, RunEvent, RunFinished, RunStarted, StateSnapshot
from agent_runtime.engine.runs.request.models import parse_last_event_id
from agent_runtime.engine.runs.request.pending import SessionAguiState, approval_interrupts, frontend_call_ids

LAST_EVENT_ID_LOC: list[str | int] = ["header", "Last-Event-ID"]


@dataclass(frozen=True)
class Hydration:
    """What a hydrate streams. `run_id`: the runId of its RUN_STARTED and terminal event; `live_run_id`: the
    live run whose log it is (its SSE ids are that run's `<run_id>:<seq>`), None when made here (no ids: there
    is nothing to resume)."""

    run_id: str
    live_run_id: UUID | None
    events: AsyncIterator[LoggedEvent]


def joined_after(live_run_id: UUID, last_event_id: str | None) -> int:
    """Where a hydrate joins the live run: after the client's `Last-Event-ID` when it names this run; from the
    start without one, or with one of an earlier run (the client has seen none of this one). Malformed: 422."""
    named = (last_event_id or "").strip().partition(":")[0]
    try:
        other = UUID(named) if named else live_run_id
    except ValueError:
        other = live_run_id  # parse_last_event_id says what is wrong with it
    after = parse_last_event_id(other, last_event_id, where=LAST_EVENT_ID_LOC)
    return after if other == live_run_id else 0


def hydrate_run_id(client_run_id: str) -> str:
    """The runId of a hydrate made here: the client's when it is a UUID (as for a run), else a new one."""
    try:
        return str(UUID(client_run_id))
    except ValueError:
        return str(uuid4())


_ENDED_AS: dict[str, RunStatus] = {"cancelled": "cancelled", "failed": "failed"}


def _run_state(thread: SessionAguiState, interrupts: list[str], pending_calls: list[str]) -> dict[str, JsonValue]:
    status = "interrupted" if interrupts else _ENDED_AS.get(thread.last_run_status or "", "completed")
    state = RunState(
        run_id=str(thread.last_run_id), status=status, pending_tool_call_ids=pending_calls, interrupts=interrupts
    )
    return state.wire()


def thread_events(
    thread: SessionAguiState, messages: list[ChatMessage], tools: Mapping[str, Tool[Any]]
) -> list[RunEvent]:
    """The hydrate of a thread without a live run, as run events (the mapper makes them AG-UI)."""
    pending = thread.pending
    finished = RunFinished()
    if pending is not None:
        finished = RunFinished(
            interrupts=approval_interrupts(pending, tools), pending_tool_call_ids=frontend_call_ids(pending)
        )
    state: dict[str, JsonValue] = dict(thread.client_state or {})
    if thread.last_run_id is not None:
        interrupt_ids = [i.id for i in finished.interrupts]
        state[RUN_STATE_KEY] = _run_state(thread, interrupt_ids, list(finished.pending_tool_call_ids))
    return [RunStarted(), MessagesSnapshot(messages=messages), StateSnapshot(state=state), finished]


async def made_here(events: list[RunEvent], *, thread_id: str, run_id: str, legacy: bool) -> AsyncIterator[LoggedEvent]:
    seq = 0
    for event in events:
        for agui_event in to_agui(event, thread_id=thread_id, run_id=run_id, legacy=legacy):
            seq += 1
            terminal = isinstance(agui_event, RunFinishedEvent | RunErrorEvent)
            yield LoggedEvent(seq=seq, data=agui_event.model_dump_json(by_alias=True), terminal=terminal)
