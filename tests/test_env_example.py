""".env.example documents exactly the fields of Settings, each with a comment, and its values are the defaults.

An entry is either active (`NAME=value`) or commented out (`# NAME=`) for secrets and computed
defaults, where an empty value would not mean "default" (an empty API key counts as set, an empty
path is the current directory).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from tests.support.settings_names import settings_env_names

from agent_runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
ENV_EXAMPLE = ROOT / ".env.example"

ENTRY = re.compile(r"^(?P<commented># )?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def _entries() -> list[tuple[int, str, bool, str]]:
    """(line index, NAME, commented out, value) for every entry line."""
    entries = []
    for index, line in enumerate(ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()):
        match = ENTRY.match(line)
        if match:
            entries.append((index, match["name"], bool(match["commented"]), match["value"]))
    return entries


def test_parser_sees_entries() -> None:
    assert len(_entries()) >= 20  # guards against the regex silently matching nothing


def test_every_settings_field_is_documented_and_nothing_else() -> None:
    names = [name for _, name, _, _ in _entries()]
    assert len(names) == len(set(names)), "duplicate entries"
    documented = set(names)
    fields = settings_env_names()
    assert not fields - documented, f"Settings fields missing from .env.example: {sorted(fields - documented)}"
    assert not documented - fields, f".env.example entries that are not Settings fields: {sorted(documented - fields)}"


def test_every_entry_has_a_comment_above() -> None:
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    for index, name, _, _ in _entries():
        above = lines[index - 1] if index > 0 else ""
        assert above.startswith("# ") and not ENTRY.match(above), f"{name} needs a one-line # comment above it"
        assert len(above) > 10, f"{name}: comment too short"


def test_secrets_are_not_filled_in() -> None:
    secret_fields = {
        name.upper()
        for name, field in Settings.model_fields.items()
        if "SecretStr" in str(field.annotation) or "secret" in name or name.endswith("_key")
    }
    assert secret_fields, "expected some secret fields"
    for _, name, commented, value in _entries():
        if name in secret_fields:
            assert commented and value == "", f"{name} must stay commented out and empty"


def test_loading_the_example_gives_the_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Isolate from the caller's environment and from any real .env in the working directory.
    fields = settings_env_names()
    for key in list(os.environ):
        if key.upper() in fields:
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    defaults = Settings(_env_file=None)
    from_example = Settings(_env_file=ENV_EXAMPLE)
    assert from_example.model_dump() == defaults.model_dump()
    assert from_example.effective_llm_model == defaults.effective_llm_model
    assert (from_example.deepseek_api_key, from_example.openai_api_key) == (None, None)

    # And the file really is read: changing one active value changes the result.
    changed = tmp_path / "changed.env"
    changed.write_text(ENV_EXAMPLE.read_text(encoding="utf-8").replace("\nPORT=8000\n", "\nPORT=8123\n"), "utf-8")
    assert Settings(_env_file=changed).port == 8123
