"""Text PostgreSQL can store, and the one validator every client text goes through.

PostgreSQL `text` and `jsonb` cannot hold NUL (U+0000), and UTF-8 cannot encode a lone surrogate
(U+D800..U+DFFF, which JSON's `"\\ud800"` escape decodes to in Python): asyncpg fails on either in the
middle of a statement. Client text is refused up front (a 422 naming the field, nothing stored); model
and tool output is stored with U+FFFD in place of such characters.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import BaseModel, BeforeValidator, Field, GetJsonSchemaHandler, PlainValidator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError
from typing_extensions import TypeAliasType

NUL = "\x00"
REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
ERROR_TYPE = "unstorable_text"
NUL_MESSAGE = "must not contain NUL (U+0000)"
SURROGATE_MESSAGE = "must not contain a lone surrogate (U+D800..U+DFFF)"
# What OpenAPI can say of the rule: no NUL. (A lone surrogate cannot be written in valid UTF-8 JSON, only
# as a `\\ud800` escape, and JSON Schema validators cannot even hold one in a string.)
NO_NUL_PATTERN = "^[^\\u0000]*$"


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


class UnstorableAt(BaseModel):
    """Where the first unstorable text of a JSON value is: its path (a bad key named with U+FFFD in place of
    the bad characters, since the error body itself must be valid UTF-8) and what is wrong."""

    loc: list[str | int]
    problem: str


def first_unstorable(value: object, path: list[str | int]) -> UnstorableAt | None:
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else UnstorableAt(loc=path, problem=problem)
    if isinstance(value, dict):
        for key, item in value.items():
            here = [*path, storable(str(key))]
            found = first_unstorable(key, here) or first_unstorable(item, here)
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = first_unstorable(item, [*path, index])
            if found is not None:
                return found
    return None


def _refuse_unstorable_json(value: object) -> dict[str, Any]:
    # A walk rather than validating the recursive JSON type below: a failure is one error naming the nested
    # key, not one per member of the JSON union at every level.
    if not isinstance(value, dict):
        raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
    found = first_unstorable(value, [])
    if found is not None:
        raise PydanticCustomError(ERROR_TYPE, f"{found.problem} at {json.dumps(found.loc)}")
    return value


class _KeysWithoutNul:
    """JSON schema of an object whose keys hold no NUL: pydantic writes the key pattern as `patternProperties`,
    which lets every other key through; `propertyNames` says what is meant."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        patterns = schema.pop("patternProperties", {})
        if patterns:
            (schema["additionalProperties"],) = patterns.values()
            schema["propertyNames"] = {"pattern": NO_NUL_PATTERN}
        return schema


class _OneSchemaForAllTypes:
    """JSON schema of a JSON value as one schema with a list of types (`pattern` only constrains strings,
    `items` arrays, and so on) instead of pydantic's `anyOf` of one schema per type: the same meaning, and
    schemathesis reads an `anyOf` branch's mutation (an array that became a boolean) as invalid data."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        merged: JsonSchemaValue = {"type": []}
        for branch in handler(core_schema).pop("anyOf"):
            merged["type"].append(branch.pop("type"))
            merged.update(branch)
        return merged


# Every text field a client sends is this type: a 422 naming the field, never a failure while storing it.
# Before pydantic's own str validation, which refuses a lone surrogate with a different type and message
# ("string_unicode") but lets NUL through: one error type and message for both.
ClientText = Annotated[
    str, BeforeValidator(_refuse_unstorable_input), Field(json_schema_extra={"pattern": NO_NUL_PATTERN})
]
# The OpenAPI shape of free-form client JSON (validated by the walk above, only documented by this type).
if TYPE_CHECKING:
    ClientJsonValue = Any  # mypy cannot follow a recursive TypeAliasType
else:
    ClientJsonValue = TypeAliasType(
        "ClientJsonValue",
        # Union[...] and not `|`: the string forward references cannot take part in `|` at run time.
        Annotated[
            Union[  # noqa: UP007
                bool,
                int,
                float,
                ClientText,
                list["ClientJsonValue"],
                Annotated[dict[ClientText, "ClientJsonValue"], _KeysWithoutNul],
                None,
            ],
            _OneSchemaForAllTypes,
        ],
    )
# Free-form JSON objects from a client (profile settings): the same rule for every key and string inside.
ClientJsonObject = Annotated[
    dict[str, Any],
    PlainValidator(
        _refuse_unstorable_json,
        json_schema_input_type=Annotated[dict[ClientText, ClientJsonValue], _KeysWithoutNul],
    ),
]


def storable(value: str) -> str:
    """Model and tool output, which we store rather than refuse: NUL and lone surrogates become U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, value) if _UNSTORABLE.search(value) else value
