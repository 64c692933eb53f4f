"""The one place where CrewAI is configured for offline use, imported and tuned.

CrewAI reads several environment variables at import time and at every flow start. Without them a
flow start queries a package index for a version check, process exit waits on a telemetry
flush, telemetry replaces the SIGTERM/SIGINT handlers, and files land under the current directory's
name in the user's data dir. So `configure_crewai_env(data_dir)` sets them (storage under
`<data_dir>/crewai`), moves the two directories no variable moves (config and credentials, below) there
too, and records "tracing declined" before the first `import crewai`; `load_crewai` then imports it.
The import costs seconds of CPU, so it stays off the CLI's and the app factory's import path: `engine/flow/turn.py`
imports no CrewAI, `flow.py` is imported lazily (after `load_crewai`, or it refuses), and the run service warms it up
off the event loop.

Tuning applied once after the import: CrewAI's console panels off (its global listener prints them whatever a flow
or agent says). Every reach into CrewAI's private API is listed in PATCHES.md beside this file.
"""

from __future__ import annotations

import base64
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

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
# The file TokenManager keeps its Fernet key in, under its storage path (PATCHES.md row 9).
CREDENTIALS_KEY_FILE = "secret.key"
# A Fernet key: 32 random bytes, URL-safe base64 (what Fernet.generate_key() returns).
FERNET_KEY_LENGTH = 44


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
        _tuned = True
    return crewai


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
    _publish_credentials_key(credentials_dir())


def _publish_credentials_key(credentials: Path) -> None:
    # TokenManager creates its key with O_CREAT|O_EXCL and only then writes it: a process that loses that race (a
    # worker beside its siblings, all on one DATA_DIR) reads the still-empty file, and its `import crewai` raises
    # "Failed to create or read encryption key". So the key is written whole under a private name and moved in
    # place (atomic: a reader sees no file or a whole key), also over a file of the wrong length that a process
    # killed between CrewAI's create and write left. Two processes may each move in a key: harmless, the key only
    # encrypts a login token the server never stores.
    key_path = credentials / CREDENTIALS_KEY_FILE
    if key_path.is_file() and len(key_path.read_bytes()) == FERNET_KEY_LENGTH:
        return
    draft = credentials / f".{CREDENTIALS_KEY_FILE}.{os.getpid()}"
    fd = os.open(draft, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    try:
        os.write(fd, base64.urlsafe_b64encode(os.urandom(32)))
    finally:
        os.close(fd)
    os.replace(draft, key_path)


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
