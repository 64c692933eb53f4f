"""`TOOLS_FILE`'s tools for the life of the process, and their reload (SIGHUP: api/app.py).

A reload reads and validates the file, opens its tools (each MCP server connected and its tools listed) and only then
hands them to the runs that start afterwards. Runs in flight keep the tools they started with, so no conversation sees
its tools change in the middle of a run; the replaced tools are closed once those runs are over. A file that fails
(invalid, a secret missing, a server down) changes nothing: the error is raised, the tools in use stay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_runtime.engine.flow.templates import FlowTemplates, TemplateConfigError
from agent_runtime.engine.flow.tools import Tool
from agent_runtime.engine.flow.tools.tools_file import (
    ConfiguredTools,
    grant_tools_file,
    identity_signer,
    load_tools_file,
)
from agent_runtime.engine.runs.service import RunService

log = logging.getLogger(__name__)


class ToolsReloaded(BaseModel):
    """What a reload changed: the file's tools now offered to new runs, in order."""

    tools: list[str]
    added: list[str]
    removed: list[str]


class ToolsFileTools:
    def __init__(
        self,
        path: Path,
        secret: str | None,
        runs: RunService,
        templates: FlowTemplates,
        registered: Sequence[Tool[Any]],
        opened: ConfiguredTools,
    ) -> None:
        """`path`: TOOLS_FILE; `secret`: TOOL_IDENTITY_SECRET; `templates`: agents.yaml's, before the file's tools
        are granted; `registered`: tools beside the built-in ones (create_app's); `opened`: the file's tools as
        start-up opened them."""
        self._path = path
        self._secret = secret
        self._runs = runs
        self._templates = templates
        self._registered = list(registered)
        self._current = opened
        self._retiring: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def reload(self) -> ToolsReloaded:
        async with self._lock:
            path, secret = self._path, self._secret
            tools_file = load_tools_file(path)
            registered = [tool.name for tool in self._registered]
            templates = grant_tools_file(path, self._templates, tools_file, registered=registered, secret=secret)
            opened = await ConfiguredTools.open(tools_file, identity_signer(path, tools_file, secret))
            before = [tool.name for tool in self._current.tools]
            in_flight = self._runs.regrant(templates, [*self._registered, *opened.tools])
            replaced, self._current = self._current, opened
            task = asyncio.create_task(self._retire(replaced, in_flight), name="tools-retire")
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
            now = tools_file.names()
            return ToolsReloaded(
                tools=now, added=[n for n in now if n not in before], removed=[n for n in before if n not in now]
            )

    async def reload_logged(self) -> None:
        """A reload asked for by a signal: its outcome goes to the log, never out of the process."""
        try:
            reloaded = await self.reload()
        except TemplateConfigError as exc:  # the file, or a server it names (ToolsConfigError is one)
            log.error("tools not reloaded: the tools in use stay", extra={"error": str(exc)})
        except Exception:
            log.exception("tools not reloaded: the tools in use stay")
        else:
            log.info("tools reloaded", extra=reloaded.model_dump())

    async def _retire(self, replaced: ConfiguredTools, in_flight: set[asyncio.Task[None]]) -> None:
        if in_flight:
            await asyncio.wait(in_flight)
        await replaced.aclose()

    async def aclose(self) -> None:
        """At shutdown, after the runs are drained: the tools in use and those still waiting to be closed."""
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        await self._current.aclose()
