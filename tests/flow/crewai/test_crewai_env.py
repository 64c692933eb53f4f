"""CrewAI is configured offline before it is imported, quiet once it is, and stays out of the app's import path."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent_runtime.engine.flow.crewai import env as crewai_env

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-env-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)


def test_crewai_is_set_up_offline_and_quiet() -> None:
    from crewai.events.event_listener import event_listener
    from crewai_core.user_data import has_user_declined_tracing

    for name, value in crewai_env.OFFLINE_ENV.items():
        assert os.environ[name] == value
    assert Path(os.environ["CREWAI_STORAGE_DIR"]).is_absolute()
    assert has_user_declined_tracing()
    assert event_listener.formatter.verbose is False


def test_modules_refuse_to_load_crewai_without_the_offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREWAI_DISABLE_TELEMETRY")
    with pytest.raises(crewai_env.CrewAIEnvError, match="load_crewai"):
        crewai_env.require_crewai_env()


def test_the_first_storage_dir_stays_once_crewai_is_imported(tmp_path: Path) -> None:
    before = os.environ[crewai_env.STORAGE_ENV]
    assert crewai_env.configure_crewai_env(tmp_path) == Path(before)
    assert os.environ[crewai_env.STORAGE_ENV] == before
    assert not (tmp_path / crewai_env.STORAGE_SUBDIR).exists()


def test_the_agents_entry_point_imports_no_crewai_until_it_is_loaded() -> None:
    # The run service imports the entry point on the app's import path; CrewAI (seconds of CPU) must stay lazy,
    # and the flow module refuses to load without the offline environment.
    code = (
        "import sys\n"
        "import agent_runtime.engine.flow.turn\n"
        "import agent_runtime.engine.runs.service\n"
        "assert 'crewai' not in sys.modules, 'crewai imported'\n"
        "from agent_runtime.engine.flow.crewai.env import CrewAIEnvError\n"
        "try:\n    import agent_runtime.engine.flow.crewai.flow\nexcept CrewAIEnvError:\n    print('refused')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREWAI_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"
