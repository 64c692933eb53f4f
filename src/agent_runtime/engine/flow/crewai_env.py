"""The one place where CrewAI is configured for offline use and imported.

CrewAI reads several environment variables at import time and at every flow start. Without them a
flow start queries a package index for a version check, process exit waits ~12 s on a telemetry
flush, telemetry replaces the SIGTERM/SIGINT handlers, and files land under the current directory's
name in the user's data dir. So the variables are set here, before the first `import crewai`, and the
modules that subclass CrewAI classes (`crew_llm`, `crew_flow`) call `require_crewai_env()` at import:
the engine imports them lazily, after `load_crewai(data_dir)` (the import itself takes ~10 s of CPU on
a small machine, so it must stay off the CLI's and the app factory's import path).

The default thread pool matters too: CrewAI's agent executor is a `Flow` whose steps are sync methods
run with `asyncio.to_thread`, and a step blocks its worker while the model answers (see `crew_llm`).
`ensure_worker_threads` sizes the loop's default executor for the number of concurrent runs.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

# Values CrewAI checks; "true"/"false" are the spellings its own code compares against.
OFFLINE_ENV: dict[str, str] = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}
STORAGE_ENV = "CREWAI_STORAGE_DIR"
STORAGE_SUBDIR = "crewai"


class CrewAIEnvError(RuntimeError):
    """CrewAI was (or would be) imported without the offline environment."""


def storage_dir_for(data_dir: Path) -> Path:
    """The absolute CrewAI storage directory under the caller's data directory."""
    # Absolute on purpose: CrewAI joins the value onto the user's data dir, and only an absolute
    # path replaces that base instead of nesting under it.
    return (data_dir / STORAGE_SUBDIR).expanduser().resolve()


def configure_crewai_env(data_dir: Path) -> Path:
    """Set CrewAI's offline environment variables; return the storage directory (created).

    Idempotent for the same directory. Refuses a different directory once CrewAI is imported,
    because CrewAI's storage paths are then already in use.
    """
    storage = storage_dir_for(data_dir)
    current = os.environ.get(STORAGE_ENV)
    if "crewai" in sys.modules and current != str(storage):
        if current is None or not _flags_set():
            raise CrewAIEnvError("crewai was imported before configure_crewai_env(); it may already be online")
        raise CrewAIEnvError(f"CrewAI is already configured with storage {current!r}, not {str(storage)!r}")
    storage.mkdir(parents=True, exist_ok=True)
    os.environ.update(OFFLINE_ENV)
    os.environ[STORAGE_ENV] = str(storage)
    _record_tracing_declined()
    return storage


def load_crewai(data_dir: Path) -> ModuleType:
    """Configure the environment, then import CrewAI (slow: ~10 s CPU the first time)."""
    configure_crewai_env(data_dir)
    crewai = importlib.import_module("crewai")
    _quiet_console()
    return crewai


def _record_tracing_declined() -> None:
    # With no consent record in the storage dir CrewAI treats the process as a "first-time user": its
    # trace listener registers ~90 event handlers at import (each event then costs a thread-pool hop)
    # and may offer to collect traces. Record the answer `crewai traces disable` would record. This
    # module of crewai_core does not import crewai itself.
    user_data = importlib.import_module("crewai_core.user_data")
    if not user_data.has_user_declined_tracing():
        user_data.update_user_data({"first_execution_done": True, "trace_consent": False})


def quiet_event_bus() -> int:
    """Detach CrewAI's own console/telemetry/trace listeners from its event bus; return how many.

    Measured: CPU per run, not correctness. Every `crewai_event_bus.emit` with a handler submits that
    handler to the bus's thread pool (one hop per event, dozens per stage) even when it does nothing
    (console quiet, telemetry and tracing off). Handlers registered by anything else are kept, and
    handlers a flow or crew adds per kickoff are unaffected. Call after `load_crewai`.
    """
    bus_module = importlib.import_module("crewai.events.event_bus")
    bus = bus_module.crewai_event_bus
    removed = 0
    # The bus has `on`/`off` but no public way to list handlers: read its registry, detach with `off`.
    for event_type, handlers in list(getattr(bus, "_sync_handlers", {}).items()):
        for handler in list(handlers):
            if getattr(handler, "__module__", "").startswith(_CREWAI_DEFAULT_LISTENER_MODULES):
                bus.off(event_type, handler)
                removed += 1
    return removed


_CREWAI_DEFAULT_LISTENER_MODULES = ("crewai.events.event_listener", "crewai.events.listeners.tracing")


def _quiet_console() -> None:
    # CrewAI's process-wide event listener prints Rich panels for every agent start/finish and tool call
    # whatever the agent's `verbose` says (only a Crew resets it, from its own `verbose`): stdout noise
    # and CPU on every run. Our logs and AG-UI events report runs instead.
    listener_module = importlib.import_module("crewai.events.event_listener")
    listener_module.event_listener.formatter.verbose = False


def require_crewai_env() -> None:
    """Raise unless `configure_crewai_env` ran in this process (called before importing crewai)."""
    storage = os.environ.get(STORAGE_ENV)
    if not _flags_set() or storage is None or not Path(storage).is_absolute():
        raise CrewAIEnvError(
            "call agent_runtime.engine.flow.crewai_env.load_crewai(data_dir) before importing the CrewAI flow modules"
        )


def ensure_worker_threads(loop: asyncio.AbstractEventLoop, workers: int) -> ThreadPoolExecutor:
    """Give `loop` a default executor with `workers` threads (call once, in the lifespan).

    Every CrewAI stage holds one worker thread while its model call is in flight (the executor's
    steps are sync and bridge back to the loop), so the default `min(32, cpus + 4)` threads cap the
    number of concurrent model calls: 6 on a 2-CPU box. Size it to at least the maximum number of
    concurrent runs. The caller owns the returned pool and shuts it down at exit.
    """
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="crewai-step")
    loop.set_default_executor(pool)
    return pool


def _flags_set() -> bool:
    return all(os.environ.get(name) == value for name, value in OFFLINE_ENV.items())
