"""The CrewAI `Flow`'s own bookkeeping stays on the event loop instead of hopping to a thread and back.

`Flow.kickoff_async` hands three synchronous jobs to the loop's default executor (`asyncio.to_thread`): after every
step `Flow._persist_method_completion` (which returns at once without `@persist`), and at the end of a kickoff
`Flow._drain_memory_writes` (at once without CrewAI memory, which our flow skips) and `CrewAIEventsBus.flush` (at
once when no event handler is pending; CrewAI calls it on the loop itself in the same kickoff's `finally`). That is
six thread hand-offs per full turn for jobs of microseconds (docs/benchmarks.md, "Orchestration"). This rule of
the app loop's executor (engine/loop_executor.py) runs exactly those three inline. PATCHES.md row 7;
tests/flow/crewai/test_crewai_patches.py reads CrewAI's code for the three calls. The event bus's own threads get
nothing from a run either: `unregister_flow_telemetry`.
"""

from __future__ import annotations

import importlib

from agent_runtime.engine.loop_executor import Job

JOBS: frozenset[tuple[str, str]] = frozenset(
    {
        ("crewai.flow.runtime", "Flow._persist_method_completion"),
        ("crewai.flow.runtime", "Flow._drain_memory_writes"),
        ("crewai.events.event_bus", "CrewAIEventsBus.flush"),
    }
)


def is_bookkeeping(job: Job) -> bool:
    return job.name in JOBS


def unregister_flow_telemetry() -> None:
    # CrewAI's process-wide listener handles every flow's start, finish and failure, and the "environment" event
    # each kickoff emits once per context (a new run is a new task, so once per run), whatever
    # `suppress_flow_events` says, on the event bus's own threads: three thread hand-offs per run, the kickoff
    # waiting for the finish's. What those handlers do is CrewAI's telemetry (off: CREWAI_DISABLE_TELEMETRY) and
    # its console panels (off for a suppressed flow), so they go. The bus's public `off` unregisters them; finding
    # them reads its private handler table (PATCHES.md row 8). Called when the agent loads (`turn.load_agent`).
    bus = importlib.import_module("crewai.events.event_bus").crewai_event_bus
    flow_events = importlib.import_module("crewai.events.types.flow_events")
    env_events = importlib.import_module("crewai.events.types.env_events")
    events = (
        flow_events.FlowStartedEvent,
        flow_events.FlowFinishedEvent,
        flow_events.FlowFailedEvent,
        env_events.DefaultEnvEvent,
        env_events.CCEnvEvent,
        env_events.CodexEnvEvent,
        env_events.CursorEnvEvent,
    )
    for event in events:
        for handler in list(bus._sync_handlers.get(event, ())):
            if handler.__qualname__.startswith("EventListener."):
                bus.off(event, handler)
