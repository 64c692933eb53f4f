"""The one place where CrewAI is configured for offline use, imported and tuned.

CrewAI reads several environment variables at import time and at every flow start. Without them a
flow start queries a package index for a version check, process exit waits on a telemetry
flush, telemetry replaces the SIGTERM/SIGINT handlers, and files land under the current directory's
name in the user's data dir. So `configure_crewai_env(data_dir)` sets them (storage under
`<data_dir>/crewai`), moves the two directories no variable moves (config and credentials, below) there
too, and records "tracing declined" before the first `import crewai`; `load_crewai` then imports it.
The import costs seconds of CPU, so it stays off the CLI's and the app factory's import path: `llm.py`
imports no CrewAI, `flow.py` is imported lazily (after `load_crewai`, or it refuses), and the run service
warms both up off the event loop.

Tuning applied once after the import (each one measured; see docs/crewai-notes.md):
- CrewAI's console panels off (its global listener prints them whatever an agent's `verbose` says).
- The agent executor's state class defined once instead of once per `Agent.kickoff` (a pydantic class per stage).
- Tool JSON schemas generated once per argument model, and flow listeners asked only about their own
  conditions' methods (measured with LiteLLM's skipped pricing: docs/crewai-notes.md).

Which threads CrewAI runs on is `engine/flow/crewai/threads.py`'s business.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# Values CrewAI checks; "true"/"false" are the spellings its own code compares against. Not
# OTEL_SDK_DISABLED: CREWAI_DISABLE_TELEMETRY alone keeps CrewAI's telemetry off (crewai_core.telemetry ORs
# them), and the variable is process-wide: it would turn our own OpenTelemetry SDK into a no-op too.
OFFLINE_ENV: dict[str, str] = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}
STORAGE_ENV = "CREWAI_STORAGE_DIR"
STORAGE_SUBDIR = "crewai"
# Under the storage directory: what CrewAI keeps under ~/.config/crewai and ~/.local/share/crewai/credentials.
CONFIG_SUBDIR = "config"
CREDENTIALS_SUBDIR = "credentials"


class CrewAIEnvError(RuntimeError):
    """CrewAI was (or would be) imported without the offline environment."""


def storage_dir_for(data_dir: Path) -> Path:
    """The absolute CrewAI storage directory under the caller's data directory."""
    # Absolute on purpose: CrewAI joins the value onto the user's data dir, and only an absolute
    # path replaces that base instead of nesting under it.
    return (data_dir / STORAGE_SUBDIR).expanduser().resolve()


def configure_crewai_env(data_dir: Path) -> Path:
    """Set CrewAI's offline environment variables; return the storage directory in use (created).

    Once CrewAI is imported its storage cannot move: later calls keep the first directory and return
    it (tests build several settings objects in one process). Raises if CrewAI was imported without
    the offline environment, because it may already have gone online.
    """
    if "crewai" in sys.modules:
        current = os.environ.get(STORAGE_ENV)
        if current is None or not _flags_set() or not Path(current).is_absolute():
            raise CrewAIEnvError("crewai was imported before configure_crewai_env(); it may already be online")
        return Path(current)
    storage = storage_dir_for(data_dir)
    storage.mkdir(parents=True, exist_ok=True)
    os.environ.update(OFFLINE_ENV)
    os.environ[STORAGE_ENV] = str(storage)
    _keep_config_and_credentials_in(storage)
    _record_tracing_declined()
    return storage


def load_crewai(data_dir: Path) -> ModuleType:
    """Configure the environment, then import and tune CrewAI (slow the first time)."""
    configure_crewai_env(data_dir)
    return _import_tuned_crewai()


def require_crewai_env() -> ModuleType:
    """Import (and tune) CrewAI, refusing unless `configure_crewai_env` ran in this process first.

    Called at the top of the modules that subclass CrewAI classes, before their `from crewai ...`.
    """
    storage = os.environ.get(STORAGE_ENV)
    if not _flags_set() or storage is None or not Path(storage).is_absolute():
        raise CrewAIEnvError(
            "call agent_runtime.engine.flow.crewai.env.load_crewai(data_dir) before importing the CrewAI flow modules"
        )
    return _import_tuned_crewai()


_tuned = False


def _import_tuned_crewai() -> ModuleType:
    global _tuned
    crewai = importlib.import_module("crewai")
    if not _tuned:
        _quiet_console()
        _reuse_executor_state_class()
        # Measured together with LiteLLM's skipped pricing, interleaved run by run (docs/crewai-notes.md): one at a
        # time each is within the noise.
        _cache_tool_schemas()
        _skip_unrelated_listeners()
        _tuned = True
    return crewai


def _reuse_executor_state_class() -> None:
    # Every Agent.kickoff builds an AgentExecutor, itself a Flow[AgentExecutorState]. Because that state
    # class is not a FlowState subclass, Flow._create_initial_state defines a brand-new pydantic model
    # class (`class StateWithId(FlowState, AgentExecutorState)`) on every construction: CPU per stage on the
    # thread that builds it (docs/crewai-notes.md, "Worked around"). Defining
    # that combined class once and handing it to the executor as its state type takes CrewAI's cheap path
    # (`state_type()`); the executor replaces the state with a plain AgentExecutorState right after anyway.
    # (`FlowState.register(...)` would be tidier, but pydantic models ignore virtual subclasses.)
    flow_runtime = importlib.import_module("crewai.flow.runtime")
    executor_class = importlib.import_module("crewai.agents.agent_executor").AgentExecutor
    state_class = getattr(executor_class, "_initial_state_t", None)
    if not isinstance(state_class, type) or issubclass(state_class, flow_runtime.FlowState):
        return
    executor_class._initial_state_t = type(
        "AgentExecutorFlowState", (flow_runtime.FlowState, state_class), {"__module__": __name__}
    )


# Tool argument models are fixed classes (ours and CrewAI's own); a bound keeps a class built per run, should
# an upgrade bring one, from growing the cache without limit (past it, schemas are generated as before).
_SCHEMA_CACHE_SIZE = 256


def _cache_tool_schemas() -> None:
    # Every kickoff turns each tool's argument model into a JSON schema twice (the native tool list, and the
    # tool description text): pydantic's schema generation plus CrewAI's rewriting of it (visible in a full
    # run's GIL time in a py-spy profile). It depends only on the class. Copies are handed out because
    # callers edit the result (`convert_tools_to_openai_schema` pops "title" and "description").
    schema_utils = importlib.import_module("crewai.utilities.pydantic_schema_utils")
    generate: Callable[..., Any] = schema_utils.generate_model_description
    cache: dict[tuple[type, bool], Any] = {}
    lock = threading.Lock()  # kickoffs run on several CrewAI threads at once

    def cached(model: type, *, strip_null_types: bool = True) -> Any:
        key = (model, strip_null_types)
        with lock:
            schema = cache.get(key)
        if schema is None:
            schema = generate(model, strip_null_types=strip_null_types)
            with lock:
                if len(cache) < _SCHEMA_CACHE_SIZE:
                    cache.setdefault(key, schema)
        return copy.deepcopy(schema)

    for name in ("crewai.utilities.agent_utils", "crewai.tools.structured_tool"):
        module = importlib.import_module(name)
        if getattr(module, "generate_model_description", None) is generate:
            vars(module)["generate_model_description"] = cached


def _skip_unrelated_listeners() -> None:
    # When any flow method finishes, CrewAI asks every listener of the flow (a score in each stage's AgentExecutor,
    # itself a Flow) whether its condition is now met, and records the finished method in that listener's
    # "seen" set first, through pydantic's slow private-attribute access (visible in a GIL profile). A condition is
    # a method name or an and/or tree of them, so it can only become met when the finished method is one of
    # its names; for any other trigger the answer is "no", and the only effect skipped is an entry in that
    # listener's seen set that its condition never looks at (CrewAI uses the set nowhere else).
    flow_runtime = importlib.import_module("crewai.flow.runtime")
    condition_events: Callable[[Any], Any] = flow_runtime._iter_condition_events
    condition_met: Callable[..., bool] = flow_runtime.Flow._condition_met

    def met_only_by_its_own_events(self: Any, condition: Any, trigger_method: str, subscription_key: Any) -> bool:
        if isinstance(condition, str):
            if condition != trigger_method:
                return False
        elif trigger_method not in condition_events(condition):
            return False
        return condition_met(self, condition, trigger_method, subscription_key)

    met_only_by_its_own_events.__wrapped__ = condition_met  # type: ignore[attr-defined]
    flow_runtime.Flow._condition_met = met_only_by_its_own_events


def _keep_config_and_credentials_in(storage: Path) -> None:
    # `import crewai` builds its trace listener, which reads a login token (creating
    # ~/.local/share/crewai/credentials/secret.key) and CrewAI's platform settings (creating ~/.config/crewai/):
    # outside DATA_DIR, in the home of whoever runs the server, and shared by every process of that user. Neither
    # path follows CREWAI_STORAGE_DIR or XDG_*: the credentials directory is `expanduser("~/.local/share")`
    # (HOME), the settings path `Path.home()` taken when crewai_core.settings is imported. So both move under
    # the storage directory: the module constant that `get_writable_config_path()` reads on every call, and
    # TokenManager's private directory lookup (pinned by tests/flow/crewai/test_crewai_paths.py). A CrewAI login
    # of the user running the server is then not picked up either: the server never signs in to CrewAI.
    settings_module = importlib.import_module("crewai_core.settings")
    token_manager = importlib.import_module("crewai_core.token_manager").TokenManager
    vars(settings_module)["DEFAULT_CONFIG_PATH"] = storage / CONFIG_SUBDIR / "settings.json"
    credentials = storage / CREDENTIALS_SUBDIR

    def credentials_dir() -> Path:
        # What CrewAI's own does, at another place: the directory created, owner-only.
        credentials.mkdir(mode=0o700, parents=True, exist_ok=True)
        credentials.chmod(0o700)
        return credentials

    token_manager._get_secure_storage_path = staticmethod(credentials_dir)


def _record_tracing_declined() -> None:
    # With no consent record in the storage dir CrewAI treats the process as a "first-time user" even
    # with tracing disabled: its trace listener registers dozens of event handlers at import and collects the
    # events of the first execution to offer uploading them to CrewAI's servers at the end. Record the
    # answer `crewai traces disable` would record, before crewai is imported. (crewai_core.user_data
    # does not import crewai.)
    user_data = importlib.import_module("crewai_core.user_data")
    if not user_data.has_user_declined_tracing():
        user_data.update_user_data({"first_execution_done": True, "trace_consent": False})


def _quiet_console() -> None:
    # CrewAI's process-wide event listener prints Rich panels for every agent start/finish and tool call
    # whatever the agent's `verbose` says (only a Crew resets it, from its own `verbose`): stdout noise
    # and CPU on every run. Our logs and AG-UI events report runs instead.
    listener_module = importlib.import_module("crewai.events.event_listener")
    listener_module.event_listener.formatter.verbose = False


def _flags_set() -> bool:
    return all(os.environ.get(name) == value for name, value in OFFLINE_ENV.items())
