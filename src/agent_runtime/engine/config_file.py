"""A YAML configuration file read into its Pydantic model, with one-line errors naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


def load_yaml_model(path: Path, model: type[ModelT], error: type[Exception], *, what: str) -> ModelT:
    """`path` validated as `model`; any problem raises `error` with one line: `<path>: <key>: <message>`."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        # A YAML error spans several lines (the mark and a caret); start-up errors are one line.
        raise error(f"{path}: cannot read {what}: {' '.join(str(exc).split())}") from exc
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "<root>"
        raise error(f"{path}: {where}: {first['msg']}") from exc
