"""Reading a stored profile's settings: any JSONB a row holds reads as settings, never as an error.

Rows outlive the models that wrote them (seed: old JSONB versions stay readable). A key today's models do not
know, or a value they no longer accept (a country dropped from ISO 3166-1, a tag over today's length cap), is left
out, so its default takes its place, and one warning names the field. Writes stay strict (`ProfileUpdate`).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from agent_runtime.engine.profiles.models import ProfileSettingsV1, ProfileSettingsV2

log = logging.getLogger(__name__)

_MODELS: dict[object, type[ProfileSettingsV1] | type[ProfileSettingsV2]] = {
    1: ProfileSettingsV1,
    2: ProfileSettingsV2,
}


def _warn(user_id: object, field: str, reason: str) -> None:
    log.warning(
        f"stored profile setting {field} not readable ({reason}): its default is used",
        extra={"user_id": str(user_id), "field": field, "reason": reason},
    )


def _drop(document: dict[str, Any], loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """Remove the deepest key of `loc` that the document holds (a list's own key when loc goes into a list);
    returns the path removed, () when none was found."""
    parent: dict[str, Any] = document
    path: list[str] = []
    for index, part in enumerate(loc):
        if not isinstance(part, str) or part not in parent:
            break
        path.append(part)
        child = parent[part]
        if index == len(loc) - 1 or not isinstance(child, dict):
            break
        parent = child
    if not path:
        return ()
    del parent[path[-1]]
    return tuple(path)


def read_stored_settings(raw: object, *, user_id: object) -> ProfileSettingsV1 | ProfileSettingsV2:
    """The settings a `profiles` row holds, read by today's models; never raises."""
    if not isinstance(raw, dict):
        _warn(user_id, "settings", "not a JSON object")
        raw = {}
    # Seed rule: settings stored before versioning have no "version" key and are v1.
    version = raw.get("version", 1)
    model = _MODELS.get(version)
    if model is None or isinstance(version, bool):
        _warn(user_id, "settings.version", f"unknown version {version!r}")
        model = ProfileSettingsV2
    document: dict[str, Any] = {**raw, "version": 1 if model is ProfileSettingsV1 else 2}
    while True:
        try:
            return model.model_validate(document)
        except ValidationError as exc:
            dropped = [(_drop(document, error["loc"]), error["type"]) for error in exc.errors()]
        removed = [(path, reason) for path, reason in dropped if path]
        if not removed:
            # Nothing left to remove yet still invalid: cannot happen with defaults for every field, but a read
            # must not fail on it either.
            _warn(user_id, "settings", "unreadable")
            return model()
        for path, reason in removed:
            _warn(user_id, ".".join(("settings", *path)), reason)
