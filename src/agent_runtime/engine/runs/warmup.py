"""The process's warm-up: CrewAI and LiteLLM imported, and the LLM client built, off the event loop."""

from __future__ import annotations

import asyncio
import gc

from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.settings import Settings


class Warmup:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._llm: LLMClient | None = None
        self._task: asyncio.Task[None] | None = None

    def client(self) -> LLMClient:
        # Built on first use: it imports LiteLLM (seconds of CPU), which `serve` must not wait for.
        if self._llm is None:
            self._llm = LLMClient(self._settings)
        return self._llm

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done() and not self._task.cancelled()

    def ensure(self) -> asyncio.Task[None]:
        """The one warm-up task (started on first call): start-up kicks it off, every run awaits it."""
        if self._task is None:
            self._task = asyncio.create_task(self._warm_up(), name="warm-up")
        return self._task

    async def _warm_up(self) -> None:
        """Import CrewAI and LiteLLM off the event loop: importing them on it would stall every request
        (and database call) in flight for seconds."""
        from agent_runtime.engine.flow.crewai_env import load_crewai

        # Importing CrewAI and LiteLLM (and building the LLM client, which imports LiteLLM) is blocking CPU
        # work that neither library offers an async way to do; a worker thread keeps the loop serving
        # requests meanwhile (the import lock makes a concurrent first run simply wait).
        await asyncio.to_thread(load_crewai, self._settings.data_dir)
        await asyncio.to_thread(__import__, "agent_runtime.engine.flow.crew_flow")
        await asyncio.to_thread(self.client)
        # The imports leave ~520k long-lived objects, and every full collection scans them all: ~270 ms with
        # every thread stopped, the event loop included. That was the 0.35-0.5 s stall when 20 runs start at
        # once. Freezing moves them out of the collector's sight; they are module-level and never garbage.
        gc.freeze()
