"""`.env` is the project's: found from the project root, also when a command runs in a subdirectory."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runtime.settings import find_env_file, load_settings


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / ".env").write_text("PORT=8123\nLOG_LEVEL=WARNING\n")
    return root


def test_found_from_the_root_and_from_a_subdirectory(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PORT", "LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    assert find_env_file(project) == project / ".env"
    assert find_env_file(project / "src" / "deep") == project / ".env"
    monkeypatch.chdir(project / "src" / "deep")
    settings = load_settings()
    assert (settings.port, settings.log_level) == (8123, "WARNING")


def test_a_closer_env_file_wins(project: Path) -> None:
    (project / "src" / ".env").write_text("PORT=8124\n")
    assert find_env_file(project / "src" / "deep") == project / "src" / ".env"


def test_no_search_past_the_project_root(tmp_path: Path, project: Path) -> None:
    (tmp_path / ".env").write_text("PORT=9999\n")  # outside the checkout: not the project's
    (project / ".env").unlink()
    assert find_env_file(project / "src") is None


def test_cli_overrides_win_and_are_validated(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PORT", raising=False)
    monkeypatch.chdir(project)
    assert load_settings(port=9001).port == 9001
