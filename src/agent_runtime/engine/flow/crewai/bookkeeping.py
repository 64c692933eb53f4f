"""The CrewAI `Flow`'s own bookkeeping stays on the event loop instead of hopping to a thread and back.

`Flow.kickoff_async` hands three synchronous jobs to the loop's default executor (`asyncio.to_thread`): after every
step `Flow._persist_method_completion` (which returns at once without `@persist`), and at the end of a kickoff
`Flow._drain_memory_writes` (at once without CrewAI memory, which our flow skips) and `CrewAIEventsBus.flush` (at
once when no event handler is pending; CrewAI calls it on the loop itself in the same kickoff's `finally`). That is
six thread hand-offs per full turn for jobs of microseconds (docs/benchmarks.md, "Orchestration"). This rule of
the app loop's executor (engine/loop_executor.py) runs exactly those three inline. PATCHES.md row 7;
tests/flow/crewai/test_crewai_patches.py reads CrewAI's code for the three calls.
"""

from __future__ import annotations

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
