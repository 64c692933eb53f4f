"""The environment variable of each Settings field, as pydantic-settings reads it."""

from __future__ import annotations

from agent_runtime.settings import Settings


def settings_env_names() -> set[str]:
    """Prefix + field name, or the field's alias; case-insensitive, written here in upper case."""
    prefix = str(Settings.model_config.get("env_prefix") or "")
    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias if isinstance(field.validation_alias, str) else None
        names.add((alias or prefix + name).upper())
    return names
