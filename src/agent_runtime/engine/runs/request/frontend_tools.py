"""Frontend tools (AG-UI `RunAgentInput.tools`): offered to the execution stage, run by the client.

The model may call one; the run then ends with outcome success and `pendingToolCallIds`, and the client's
next run carries the results as tool messages. Validated before the run starts, since every name,
description and schema ends up in each execution-stage request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence

import ag_ui.core as agui
from pydantic import BaseModel, ConfigDict, JsonValue

from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.llm.models import FunctionSpec, ToolSchema

MAX_FRONTEND_TOOLS = 10
MAX_DESCRIPTION_CHARS = 1_000
# A tool's JSON schema as sent to the model; 8 KB holds a form of a few dozen fields.
MAX_SCHEMA_BYTES = 8_192
# What OpenAI-compatible providers accept as a function name.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class FrontendTool(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, JsonValue]

    def openai_schema(self) -> ToolSchema:
        return ToolSchema(
            function=FunctionSpec(name=self.name, description=self.description, parameters=self.parameters)
        )


def _invalid(index: int, field: str, msg: str) -> ValidationFailedError:
    return ValidationFailedError("invalid tool", details=[ErrorDetail(loc=["body", "tools", index, field], msg=msg)])


def _parameters(index: int, parameters: object) -> dict[str, JsonValue]:
    if parameters is None:
        return {"type": "object", "properties": {}}
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise _invalid(index, "parameters", 'must be a JSON schema of an object ({"type": "object", ...})')
    if len(json.dumps(parameters, ensure_ascii=False).encode()) > MAX_SCHEMA_BYTES:
        raise _invalid(index, "parameters", f"must be at most {MAX_SCHEMA_BYTES} bytes of JSON")
    return parameters


def frontend_tools(tools: Sequence[agui.Tool] | None, server_tools: Collection[str]) -> list[FrontendTool]:
    """The client's tools, validated: names unique and not a server tool's, count and sizes bounded."""
    tools = list(tools or [])
    if len(tools) > MAX_FRONTEND_TOOLS:
        raise ValidationFailedError(
            "too many tools",
            details=[ErrorDetail(loc=["body", "tools"], msg=f"at most {MAX_FRONTEND_TOOLS} tools per run")],
        )
    checked: list[FrontendTool] = []
    for index, tool in enumerate(tools):
        if not _NAME.match(tool.name):
            raise _invalid(index, "name", "must be 1 to 64 letters, digits, '_' or '-'")
        if tool.name in server_tools:
            raise _invalid(index, "name", f"{tool.name!r} is a server tool's name")
        if any(tool.name == other.name for other in checked):
            raise _invalid(index, "name", f"duplicate tool name {tool.name!r}")
        if len(tool.description) > MAX_DESCRIPTION_CHARS:
            raise _invalid(index, "description", f"must be at most {MAX_DESCRIPTION_CHARS} characters")
        checked.append(
            FrontendTool(name=tool.name, description=tool.description, parameters=_parameters(index, tool.parameters))
        )
    return checked
