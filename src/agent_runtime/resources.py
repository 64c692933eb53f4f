"""Where the data files the service reads at run time live: config templates, the price table, migrations.

The repository keeps them at the top level (`config/`, `migrations/`), where people edit them; the wheel
carries copies inside the package (`agent_runtime/data/`, hatch `force-include` in pyproject.toml), so an
installed package (pip, the Docker image) finds them with `importlib.resources`. An editable install (a
checkout under `uv run`) has no such copy next to the source and falls back to the checkout. Settings
(`CONFIG_DIR`, `MIGRATIONS_DIR`) override both.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGE_DATA = "data"


def data_root() -> Path:
    """The directory holding `config/` and `migrations/`: the installed package data, else the checkout."""
    packaged = files("agent_runtime") / PACKAGE_DATA
    # Installed from a wheel on a filesystem, importlib.resources hands out real paths; a zipped package
    # (which would not) is not a way this service is installed.
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2]


def default_config_dir() -> Path:
    return data_root() / "config"


def default_migrations_dir() -> Path:
    return data_root() / "migrations"
