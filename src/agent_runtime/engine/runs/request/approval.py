"""What a resume entry's `payload` may be for a tool approval, and the `responseSchema` that says so.

The interrupt publishes the schema; the payload is validated against exactly that (one Pydantic model, extra
keys refused), so a client never sees a payload accepted that the schema it was given forbids. Two shapes:

- `{"arguments": {...}}`: the user's edited arguments, checked against the tool's own schema;
- `{"approved": true | false}`: CopilotKit's documented approval answer (its interrupt examples resolve with
  it), taken as what it says: `true` approves, `false` denies, like status `cancelled`.

Both may come together (`{"approved": true, "arguments": {...}}`); an absent payload approves as the model
asked.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.flow.tools import Tool

EXPECTED_SHAPE = '{"approved": true|false} and/or {"arguments": {...}} (or no payload)'


class ApprovalPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    approved: bool | None = None
    arguments: dict[str, JsonValue] | None = None


class ApprovalAnswer(BaseModel):
    approved: bool
    arguments: str | None = None


def approval_response_schema(arguments_schema: dict[str, Any]) -> dict[str, Any]:
    """The interrupt's `responseSchema`: `ApprovalPayload` with the tool's own schema for `arguments`."""
    return {
        "type": "object",
        "properties": {"approved": {"type": "boolean"}, "arguments": arguments_schema},
        "additionalProperties": False,
    }


def _invalid(loc: list[str | int], msg: str) -> ValidationFailedError:
    return ValidationFailedError("invalid resume payload", details=[ErrorDetail(loc=loc, msg=msg)])


def read_approval(payload: JsonValue, tool: Tool[Any] | None, loc: list[str | int]) -> ApprovalAnswer:
    """A resolved entry's payload as the interrupt's responseSchema allows it, else a 422 naming the shape."""
    if payload is None:
        return ApprovalAnswer(approved=True)
    try:
        parsed = ApprovalPayload.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "payload"
        raise _invalid(loc, f"{where}: {first['msg']}; must be {EXPECTED_SHAPE}") from None
    if parsed.arguments is None:
        return ApprovalAnswer(approved=parsed.approved is not False)
    arguments = json.dumps(parsed.arguments, ensure_ascii=False)
    if tool is not None:
        try:
            tool.args_model.model_validate_json(arguments)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValidationFailedError(
                "invalid tool arguments", details=[ErrorDetail(loc=[*loc, "arguments"], msg=problems)]
            ) from None
    return ApprovalAnswer(approved=parsed.approved is not False, arguments=arguments)
