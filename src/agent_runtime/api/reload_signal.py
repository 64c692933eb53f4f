"""SIGHUP reloads TOOLS_FILE (engine/tools_reload.py) in a running server."""

from __future__ import annotations

import asyncio
import signal
import threading
from dataclasses import dataclass, field

from agent_runtime.engine.tools_reload import ToolsFileTools


@dataclass
class HangupReloads:
    """SIGHUP reloads TOOLS_FILE (engine/tools_reload.py), one reload after another; ops send it to the process (to
    the parent with WORKERS > 1, which passes it on to every worker)."""

    tools: ToolsFileTools
    installed: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def on_hangup(self) -> None:
        task = asyncio.create_task(self.tools.reload_logged(), name="tools-reload")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def close(self) -> None:
        if self.installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        for task in self.tasks:
            task.cancel()


def reload_on_hangup(tools: ToolsFileTools) -> HangupReloads:
    reloads = HangupReloads(tools)
    # A loop's signal handlers live in the main thread only (an app served from another thread: no reload).
    if threading.current_thread() is threading.main_thread():
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloads.on_hangup)
        reloads.installed = True
    return reloads
