"""CrewAI keeps its config and credentials under the storage directory (DATA_DIR/crewai), not in the home
directory: env.py moves the two paths no variable moves, and these tests fail when an upgrade moves what it
replaces. (tests/test_first_start.py checks a real `serve` and run leave $HOME empty.)"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent_runtime.engine.flow.crewai import env as crewai_env

_CREWAI_DATA = Path(tempfile.gettempdir()) / f"agent-runtime-crewai-paths-{os.getpid()}"
crewai_env.load_crewai(_CREWAI_DATA)
atexit.register(shutil.rmtree, _CREWAI_DATA, ignore_errors=True)

import crewai_core.settings as crewai_settings  # noqa: E402
from crewai_core.auth.token import AuthError, get_auth_token  # noqa: E402
from crewai_core.plus_api import PlusAPI  # noqa: E402
from crewai_core.token_manager import TokenManager  # noqa: E402

# The first configure_crewai_env of this process chose it (CrewAI's storage cannot move once imported).
STORAGE = Path(os.environ[crewai_env.STORAGE_ENV])


def test_what_import_crewai_reads_and_creates_stays_under_the_storage_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CrewAI's own lookups follow HOME at call time (credentials) or read it once at import (settings): an empty
    # HOME shows that neither is consulted any more.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # What building CrewAI's trace listener does at `import crewai` (TraceBatchManager.__init__).
    with pytest.raises(AuthError):
        get_auth_token()
    PlusAPI()
    assert list(home.iterdir()) == []
    credentials = STORAGE / crewai_env.CREDENTIALS_SUBDIR
    assert (credentials / "secret.key").is_file()
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o700
    assert (STORAGE / crewai_env.CONFIG_SUBDIR).is_dir()


def test_the_replaced_lookups_are_the_ones_crewai_uses() -> None:
    # Settings: `get_writable_config_path()` reads the module constant on each call (its first choice), and
    # Settings() without a path asks it.
    assert "DEFAULT_CONFIG_PATH" in crewai_settings.get_writable_config_path.__code__.co_names
    expected = STORAGE / crewai_env.CONFIG_SUBDIR / "settings.json"
    assert crewai_settings.get_writable_config_path() == expected
    assert crewai_settings.Settings().config_path == expected
    # Credentials: every file operation of TokenManager asks its private directory lookup.
    assert isinstance(vars(TokenManager)["_get_secure_storage_path"], staticmethod)
    file_operations = (
        "_atomic_create_secure_file",
        "_atomic_write_secure_file",
        "_read_secure_file",
        "_delete_secure_file",
    )
    for method in file_operations:
        assert "_get_secure_storage_path" in getattr(TokenManager, method).__code__.co_names, method
    assert TokenManager._get_secure_storage_path() == STORAGE / crewai_env.CREDENTIALS_SUBDIR


def _load_crewai_in_a_new_process(data_dir: Path) -> subprocess.Popen[str]:
    code = (
        "from pathlib import Path\n"
        "from agent_runtime.engine.flow.crewai.env import load_crewai\n"
        f"load_crewai(Path({str(data_dir)!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREWAI_")}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)


def test_a_key_file_left_empty_does_not_stop_crewai_from_loading(tmp_path: Path) -> None:
    # What a worker that loses CrewAI's create-then-write race to a sibling sees (and what a process killed
    # between the two leaves): the key file there, empty. CrewAI alone raises "Failed to create or read
    # encryption key" at `import crewai`, and the worker never starts.
    credentials = tmp_path / crewai_env.STORAGE_SUBDIR / crewai_env.CREDENTIALS_SUBDIR
    credentials.mkdir(parents=True)
    (credentials / "secret.key").touch()
    process = _load_crewai_in_a_new_process(tmp_path)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert len((credentials / "secret.key").read_bytes()) == 44
    assert sorted(path.name for path in credentials.iterdir()) == ["secret.key"]


def test_processes_loading_crewai_on_one_new_data_dir_at_once_all_load(tmp_path: Path) -> None:
    processes = [_load_crewai_in_a_new_process(tmp_path) for _ in range(6)]
    failures = [
        stderr for process in processes for _, stderr in [process.communicate(timeout=180)] if process.returncode
    ]
    assert failures == []
    key = tmp_path / crewai_env.STORAGE_SUBDIR / crewai_env.CREDENTIALS_SUBDIR / "secret.key"
    assert len(key.read_bytes()) == 44
