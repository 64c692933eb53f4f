"""Text PostgreSQL can store, and the one validator every client text goes through.

PostgreSQL `text` and `jsonb` cannot hold NUL (U+0000), and UTF-8 cannot encode a lone surrogate
(U+D800..U+DFFF, which JSON's `"\\ud800"` escape decodes to in Python): asyncpg fails on either in the
middle of a statement. Client text is refused up front (a 422 naming the field, nothing stored); model
and tool output is stored with U+FFFD in place of such characters.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator
from pydantic_core import PydanticCustomError

NUL = "\x00"
REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
ERROR_TYPE = "unstorable_text"
NUL_MESSAGE = "must not contain NUL (U+0000)"
SURROGATE_MESSAGE = "must not contain a lone surrogate (U+D800..U+DFFF)"


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored, or None when it can."""
    match = _UNSTORABLE.search(value)
    if match is None:
        return None
    return NUL_MESSAGE if match.group() == NUL else SURROGATE_MESSAGE


def refuse_unstorable(value: str) -> str:
    """The check behind `ClientText`, for validators that cannot use the annotated type."""
    problem = text_problem(value)
    if problem is not None:
        raise PydanticCustomError(ERROR_TYPE, problem)
    return value


def _refuse_unstorable_input(value: object) -> object:
    return refuse_unstorable(value) if isinstance(value, str) else value


def _first_problem(value: object, path: list[str | int]) -> str | None:
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else f"{problem} at {json.dumps(path)}"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = text_problem(key)
            if problem is not None:
                return f"{problem} in the key at {json.dumps([*path, key])}"
            found = _first_problem(item, [*path, key])
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_problem(item, [*path, index])
            if found is not None:
                return found
    return None


def _refuse_unstorable_json(value: dict[str, Any]) -> dict[str, Any]:
    # A walk rather than a recursive JSON type of ClientText: the schema stays a plain object and a
    # failure is one error naming the nested key, not one per member of the JSON union.
    problem = _first_problem(value, [])
    if problem is not None:
        raise PydanticCustomError(ERROR_TYPE, problem)
    return value


# Every text field a client sends is this type: a 422 naming the field, never a failure while storing it.
# Before pydantic's own str validation, which refuses a lone surrogate with a different type and message
# ("string_unicode") but lets NUL through: one error type and message for both.
ClientText = Annotated[str, BeforeValidator(_refuse_unstorable_input)]
# Free-form JSON objects from a client (profile settings): the same rule for every key and string inside.
ClientJsonObject = Annotated[dict[str, Any], AfterValidator(_refuse_unstorable_json)]


def storable(value: str) -> str:
    """Model and tool output, which we store rather than refuse: NUL and lone surrogates become U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, value) if _UNSTORABLE.search(value) else value
