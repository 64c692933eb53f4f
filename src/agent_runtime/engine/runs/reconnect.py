"""A client reconnecting to a thread: the stream of an AG-UI input with nothing to run (a hydrate; agui/hydrate.py
makes its events, docs/api.md "Reconnecting to a thread")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ag_ui.core import RunAgentInput

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.store import MessageStore
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.runs.agui.hydrate import Hydration, hydrate_run_id, joined_after, made_here, thread_events
from agent_runtime.engine.runs.agui.input import AguiRequest, is_legacy_client
from agent_runtime.engine.runs.events.hub import RunEventHub
from agent_runtime.engine.runs.turn.thread_view import visible_thread


async def hydrate(
    ctx: RequestContext,
    request: AguiRequest,
    agui_input: RunAgentInput,
    last_event_id: str | None,
    hub: RunEventHub,
    messages: MessageStore,
    tools: Mapping[str, Tool[Any]],
) -> Hydration:
    """The stream of an input with nothing to run: the thread's live run (after `last_event_id` when it names that
    run), or the thread as it stands."""
    live = request.thread.live_run_id
    if live is not None:
        after = joined_after(live, last_event_id)
        events = await hub.follow(ctx, request.session_id, live, after=after)
        return Hydration(run_id=str(live), live_run_id=live, events=events)
    run_id = hydrate_run_id(agui_input.run_id)
    visible = await visible_thread(messages, ctx, request.session_id)
    made = thread_events(request.thread, visible, tools)
    legacy = is_legacy_client(agui_input.protocol_version)
    events = made_here(made, thread_id=str(request.session_id), run_id=run_id, legacy=legacy)
    return Hydration(run_id=run_id, live_run_id=None, events=events)
